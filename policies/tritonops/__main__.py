"""tritonops CrossGuard policy pack: `pulumi up --policy-pack policies/tritonops
--policy-pack-config policies/tritonops/config.<env>.json`."""

from pulumi_policy import EnforcementLevel, PolicyPack
from tritonops_policy import POLICIES

PolicyPack(name="tritonops", enforcement_level=EnforcementLevel.MANDATORY, policies=POLICIES)
