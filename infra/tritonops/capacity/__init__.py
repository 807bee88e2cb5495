"""Capacity planning: how many replicas and nodes a model service needs over a day, and what they cost."""

# Built-in day shapes (UTC hours 0..23).
PROFILES: dict[str, list[float]] = {
    # An API used around the clock, busiest in the evening.
    "consumer": [0.35, 0.3, 0.25, 0.2, 0.2, 0.25, 0.35, 0.5, 0.6, 0.65, 0.7, 0.72,
                 0.75, 0.75, 0.72, 0.7, 0.72, 0.8, 0.9, 1.0, 0.95, 0.8, 0.6, 0.45],
    # Office hours only: nothing at night (where scale-to-zero pays).
    "business": [0, 0, 0, 0, 0, 0, 0.05, 0.3, 0.8, 1.0, 0.95, 0.9,
                 0.7, 0.9, 1.0, 0.95, 0.8, 0.5, 0.2, 0.05, 0, 0, 0, 0],
}
