"""The cluster-aws stack: EKS, its GPU node pools (managed groups, Karpenter, cluster-autoscaler),
release buckets."""
