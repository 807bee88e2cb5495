"""The platform stack: the GPU Operator, kube-prometheus-stack and KEDA charts."""
