"""Capacity planning: how many replicas and nodes a model service needs over a day, and what they cost."""
