import unittest

from wordstats import word_count


class WordCountTest(unittest.TestCase):
    def test_empty_text_has_no_words(self):
        self.assertEqual(word_count(""), 0)

    def test_repeated_spaces_do_not_make_words(self):
        self.assertEqual(word_count("a  b c"), 3)

    def test_plain_sentence(self):
        self.assertEqual(word_count("one two three"), 3)
