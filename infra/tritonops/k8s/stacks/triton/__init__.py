"""The triton stack: per model service its pods, release agent, routes, autoscaling, monitoring and
drift check; the GPU memory budget; the stack's exports."""
