"""Each stack's own code, one sub-package per Pulumi project under ``stacks/``: its builders, its rules
across config fields (``checks``), and its program (``program``: ``render`` and the Pulumi program)."""
