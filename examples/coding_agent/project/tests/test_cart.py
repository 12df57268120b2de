import unittest

from shop.cart import Cart


class CartTest(unittest.TestCase):
    def test_single_item(self):
        cart = Cart()
        cart.add("pen", 2.5)
        self.assertEqual(cart.total(), 2.5)

    def test_several_items(self):
        cart = Cart()
        cart.add("pen", 2.5)
        cart.add("book", 40.0)
        self.assertEqual(cart.total(), 42.5)

    def test_quantity_counts(self):
        cart = Cart()
        cart.add("pen", 2.5, qty=4)
        self.assertEqual(cart.total(), 10.0)

    def test_discount_is_a_percentage(self):
        cart = Cart()
        cart.add("book", 40.0)
        cart.apply_discount(10)
        self.assertEqual(cart.total(), 36.0)

    def test_rejects_zero_quantity(self):
        with self.assertRaises(ValueError):
            Cart().add("pen", 2.5, qty=0)

    def test_rejects_discount_over_100(self):
        with self.assertRaises(ValueError):
            Cart().apply_discount(150)


if __name__ == "__main__":
    unittest.main()
