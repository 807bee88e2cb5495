"""The controller's release lifecycle: stage and gate push-mode releases, publish, promote, roll back.

``push`` is what the ``model_repository`` role runs on the controller (``python -m tritonops.release.push
prepare|fetch-s3|golden``: validate, checksum and stage a release, fetch it from S3, gate it with the
agent's golden gate); ``publish`` writes releases and channel pointers into a store for pull mode and
moves them (promote, rollback, status); ``canary`` asks Prometheus whether a canary may be promoted.
What runs on a node or in a pod is the release agent (:mod:`tritonops.agent`).
"""
