"""The Pulumi ComponentResources of the three stacks, one per module, over ``base``'s helpers."""
