"""Counting words, lines and characters in text."""


def word_count(text):
    """The number of words in text (words are separated by any whitespace)."""
    return len(text.split(" "))


def line_count(text):
    """The number of lines in text."""
    return len(text.splitlines())


def char_count(text):
    """The number of characters in text, whitespace left out."""
    return len(text)
