"""The repository's own tests. One fails at this commit, for a bug of its own (char_count counts
whitespace), unrelated to word_count: a task on word_count is scored on the outcome each test must have,
not on the whole run's exit status, which stays 1 with or without the fix."""

import unittest

from textstats.counts import char_count


class TestChars(unittest.TestCase):
    def test_a_word(self):
        self.assertEqual(char_count("abc"), 3)

    def test_whitespace_is_left_out(self):
        self.assertEqual(char_count("a b\n"), 2)


if __name__ == "__main__":
    unittest.main()
