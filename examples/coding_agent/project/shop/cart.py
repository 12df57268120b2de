"""A shopping cart: lines of (item, unit price, quantity), and a percentage discount."""


class Cart:
    def __init__(self):
        self.lines = []  # (item, unit_price, qty)
        self.discount_percent = 0.0

    def add(self, item, unit_price, qty=1):
        if qty < 1:
            raise ValueError("qty must be at least 1")
        if unit_price < 0:
            raise ValueError("unit_price must not be negative")
        self.lines.append((item, unit_price, qty))

    def subtotal(self):
        return sum(unit_price for _item, unit_price, _qty in self.lines)

    def apply_discount(self, percent):
        if not 0 <= percent <= 100:
            raise ValueError("percent must be between 0 and 100")
        self.discount_percent = percent

    def total(self):
        return round(self.subtotal() - self.discount_percent, 2)
