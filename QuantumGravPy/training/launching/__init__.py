"""Starting training: the sequence every entry point runs (:mod:`.fit`), a whole job over
several processes (:mod:`.launch`), and ``qg profile`` (:mod:`.profile`).

The top of the training layer.
"""
