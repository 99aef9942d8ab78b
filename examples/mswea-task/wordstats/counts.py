def word_count(text):
    """Number of whitespace-separated words in text."""
    return len(text.split(" "))
