import unittest

from calc import add, mean


class CalcTest(unittest.TestCase):
    def test_add(self) -> None:
        self.assertEqual(add(2, 3), 5)

    def test_mean(self) -> None:
        self.assertEqual(mean([1.0, 2.0, 3.0]), 2.0)


if __name__ == "__main__":
    unittest.main()
