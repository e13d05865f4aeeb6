"""Analyses of logs: token selection (:mod:`.grep`), schema validation (:mod:`.validate`), pages of
a log (:mod:`.pretty`) and of two logs compared (:mod:`.diff`).
"""
