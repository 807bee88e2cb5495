"""Release stores: a folder, HTTP(S), S3 and an OCI registry, read by nodes and written by the controller.

Reads (``reader``: one ``Store`` for every kind; ``oci_reader`` and ``oci_api`` for registries; SigV4 and
the AWS credential chain in ``aws_credentials``) use the standard library only and ship in the agent's
zipapp. Writes (``writer``, ``oci_writer``) are the controller's; S3 writes use boto3, imported inside the
functions that write, so the node never loads it.

Rules for this package: the standard library and ``tritonops.core`` only, boto3 and botocore inside write
functions only (tests/unit/test_layers.py), relative imports only (the zipapp renames the package).
"""
