"""Models: the line protocol (:mod:`.wire`), the Python model API (:mod:`.api`), programs over
pipes (:mod:`.shell`), serving a Python model (:mod:`.serve`), answer streams (:mod:`.session`),
model specs (:mod:`.spec`) and the built-in n-gram model (:mod:`.ngram`).
"""
