def inclusive_range(start, stop):
    """Return the integers from start to stop, both included."""
    return list(range(start, stop))
