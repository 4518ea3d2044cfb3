"""Generate the sample invoices and receipts of ``samples/`` and the values they hold.

    python scripts/make_invoices.py                 # samples/*.pdf + examples/fields-truth.json
    python scripts/make_invoices.py OUT_DIR TRUTH   # the same documents elsewhere (tests do this)
    python scripts/make_invoices.py OUT_DIR TRUTH --extra   # plus documents the tests need

Every value printed on a document comes from the data below, so the fields a run extracts can be
checked against ``examples/fields-truth.json`` (one entry per file: its class and its fields as
``examples/invoice.schema.json`` / ``examples/receipt.schema.json`` describe them). The PDFs are
reproducible (reportlab's invariant mode: no creation date, no random id). Needs reportlab (the
``test`` extra). The files in ``samples/`` are committed; users never need to run this.

Dates are printed the way documents print them ("March 15, 2024", "02.03.2024") and numbers with
thousands separators; the truth holds ISO dates and plain numbers, as the schemas ask for.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from reportlab.lib.pagesizes import A4, letter
from reportlab.lib.units import mm
from reportlab.pdfgen import canvas

REPO = Path(__file__).resolve().parents[1]
#: Rows of line items a page holds before the table continues on the next page.
ROWS_PER_PAGE = 9
#: Line spacing in points: wide enough that every printed line is its own line of text.
LINE = 20


@dataclass
class Invoice:
    file: str
    seller_name: str
    invoice_number: str
    invoice_date: dt.date
    due_date: dt.date
    buyer_name: str
    currency: str
    items: list[tuple[str, int, str]]  # description, quantity, unit price (as printed, no separators)
    tax_rate: Decimal
    #: A printed subtotal that differs from the items' sum (a real invoice with a mistake).
    misprinted_subtotal: str | None = None
    page_size: tuple[float, float] = letter

    def amounts(self) -> list[Decimal]:
        return [Decimal(q) * Decimal(p) for _, q, p in self.items]

    def subtotal(self) -> Decimal:
        return Decimal(self.misprinted_subtotal) if self.misprinted_subtotal else sum(self.amounts(), Decimal(0))

    def tax(self) -> Decimal:
        return (self.subtotal() * self.tax_rate).quantize(Decimal("0.01"))

    def total(self) -> Decimal:
        return self.subtotal() + self.tax()

    def truth(self) -> dict:
        return {
            "class": "invoice",
            "fields": {
                "invoice_number": self.invoice_number,
                "invoice_date": self.invoice_date.isoformat(),
                "due_date": self.due_date.isoformat(),
                "seller_name": self.seller_name,
                "buyer_name": self.buyer_name,
                "currency": self.currency,
                "line_items": [
                    {"description": d, "quantity": q, "unit_price": float(Decimal(p)), "amount": float(a)}
                    for (d, q, p), a in zip(self.items, self.amounts())
                ],
                "subtotal": float(self.subtotal()),
                "tax": float(self.tax()),
                "total": float(self.total()),
            },
            "pages": _pages_of(len(self.items)),
        }


@dataclass
class Receipt:
    file: str
    merchant: str
    receipt_number: str
    date: dt.date
    payment_method: str
    items: list[tuple[str, str]]  # description, amount as printed
    note: str = "Thank you for your visit!"

    def total(self) -> Decimal:
        return sum((Decimal(a) for _, a in self.items), Decimal(0))

    def truth(self) -> dict:
        return {
            "class": "receipt",
            "fields": {
                "merchant": self.merchant,
                "receipt_number": self.receipt_number,
                "date": self.date.isoformat(),
                "payment_method": self.payment_method,
                "items": [{"description": d, "amount": float(Decimal(a))} for d, a in self.items],
                "total": float(self.total()),
            },
            "pages": 1,
        }


@dataclass
class Letter:
    """A document of no known class (no fields: ``class`` other)."""

    file: str
    title: str
    paragraphs: list[str] = field(default_factory=list)

    def truth(self) -> dict:
        return {"class": "other", "fields": None, "pages": 1}


def _pages_of(items: int) -> int:
    return max(1, -(-items // ROWS_PER_PAGE))


SAMPLES: list[Invoice | Receipt] = [
    Invoice(
        file="invoice-2024-0017.pdf",
        seller_name="Harbor Lane Supplies Ltd",
        invoice_number="INV-2024-0017",
        invoice_date=dt.date(2024, 3, 15),
        due_date=dt.date(2024, 4, 14),
        buyer_name="Meridian Dental Clinic",
        currency="EUR",
        items=[("Nitrile gloves, box of 100", 4, "12.50"), ("Autoclave pouches", 3, "18.20"),
               ("Dental bib clips", 10, "3.75")],
        tax_rate=Decimal("0.20"),
        page_size=A4,
    ),
    Invoice(
        file="invoice-2024-0042.pdf",
        seller_name="Northgate Office Furniture Inc",
        invoice_number="INV-2024-0042",
        invoice_date=dt.date(2024, 6, 3),
        due_date=dt.date(2024, 7, 3),
        buyer_name="Bluewater Analytics LLC",
        currency="USD",
        items=[
            ("Standing desk frame", 6, "489.00"), ("Oak desk top 160 cm", 6, "212.50"),
            ("Task chair, mesh back", 12, "329.90"), ("Monitor arm, dual", 6, "118.75"),
            ("Cable tray", 6, "24.99"), ("Under-desk drawer unit", 4, "185.00"),
            ("Meeting table 240 cm", 1, "1450.00"), ("Meeting chair", 8, "149.00"),
            ("Whiteboard 180 x 120 cm", 2, "264.00"), ("Acoustic panel set", 3, "395.00"),
            ("Floor lamp, LED", 4, "89.90"), ("Coat stand", 2, "59.00"),
            ("Delivery and assembly", 1, "650.00"),
        ],
        tax_rate=Decimal("0.0825"),
    ),
    Invoice(
        file="invoice-2024-0051.pdf",
        seller_name="Fenwick Print Works",
        invoice_number="INV-2024-0051",
        invoice_date=dt.date(2024, 9, 30),
        due_date=dt.date(2024, 10, 30),
        buyer_name="Ashby Community Theatre",
        currency="GBP",
        items=[("Poster print A2", 40, "2.75"), ("Programme booklet", 300, "0.65"), ("Ticket stock, roll", 2, "17.50")],
        tax_rate=Decimal("0.20"),
        # The items come to 110.00 + 195.00 + 35.00 = 340.00; the printed subtotal (and the tax and
        # total computed from it) says 304.00: the fields are what is printed, and the row is
        # invalid because the schema's check finds that the items do not sum to the subtotal.
        misprinted_subtotal="304.00",
        page_size=A4,
    ),
    Receipt(
        file="receipt-0381.pdf",
        merchant="Corner Bakery",
        receipt_number="R-000381",
        date=dt.date(2024, 3, 2),
        payment_method="card",
        items=[("Sourdough loaf", "4.20"), ("Croissant x2", "3.60"), ("Flat white", "3.10")],
    ),
    Receipt(
        file="receipt-0977.pdf",
        merchant="Riverside Hardware",
        receipt_number="R-000977",
        date=dt.date(2024, 11, 18),
        payment_method="cash",
        items=[("Wood screws 4x40, 200 pcs", "6.95"), ("Masking tape", "2.49"), ("Paint brush set", "11.90"),
               ("Sandpaper assortment", "5.25")],
    ),
]

#: Documents only the tests use: classified by keywords (a neutral file name), by the model (no
#: keyword at all), and one of no known class.
EXTRA: list[Invoice | Receipt | Letter] = [
    Invoice(
        file="scan-0001.pdf",
        seller_name="Kestrel Marine Services",
        invoice_number="INV-2023-0815",
        invoice_date=dt.date(2023, 12, 1),
        due_date=dt.date(2023, 12, 31),
        buyer_name="Port of Linwood Authority",
        currency="EUR",
        items=[(f"Hull inspection, berth {n}", 1, f"{300 + 15 * n}.00") for n in range(1, 21)],
        tax_rate=Decimal("0.21"),
    ),
    Receipt(
        file="scan-0002.pdf",
        merchant="Lantern Books",
        receipt_number="R-004410",
        date=dt.date(2024, 1, 20),
        payment_method="card",
        items=[("Paperback novel", "9.99"), ("Bookmark", "1.50")],
    ),
    Letter(
        file="scan-0003.pdf",
        title="Minutes of the garden committee",
        paragraphs=["The committee met on a sunny afternoon and agreed to plant more tulips.",
                    "The next meeting will take place after the harvest festival."],
    ),
]


def _money(value: Decimal) -> str:
    return f"{value:,.2f}"


def _long_date(day: dt.date) -> str:
    return f"{day.strftime('%B')} {day.day}, {day.year}"


def write_invoice(inv: Invoice, path: Path) -> None:
    """An invoice: header fields as labelled lines, a table of line items (continued on later
    pages under a repeated header), totals on the last page."""
    width, height = inv.page_size
    pdf = canvas.Canvas(str(path), pagesize=inv.page_size, invariant=1)
    pdf.setTitle(f"Invoice {inv.invoice_number}")
    x = 60

    def table_line(cells: tuple[str, str, str, str]) -> str:
        # One fixed-width string per row (as many invoicing systems print them): the PDF's text
        # layer then keeps a row's cells together, in order.
        return f"{cells[0]:<34}{cells[1]:>9}{cells[2]:>13}{cells[3]:>13}"

    def header_row(y: float) -> float:
        pdf.setFont("Courier-Bold", 9)
        pdf.drawString(x, y, table_line(("Description", "Quantity", "Unit price", "Amount")))
        return y - LINE

    pages = [inv.items[i : i + ROWS_PER_PAGE] for i in range(0, len(inv.items), ROWS_PER_PAGE)] or [[]]
    amounts = iter(inv.amounts())
    for number, rows in enumerate(pages, start=1):
        y = height - 70
        if number == 1:
            pdf.setFont("Helvetica-Bold", 20)
            pdf.drawString(x, y, inv.seller_name)
            y -= 34
            pdf.setFont("Helvetica-Bold", 14)
            pdf.drawString(x, y, "INVOICE")
            y -= 30
            pdf.setFont("Helvetica", 10)
            for label, value in (
                ("Invoice number", inv.invoice_number),
                ("Invoice date", _long_date(inv.invoice_date)),
                ("Due date", _long_date(inv.due_date)),
                ("Seller", inv.seller_name),
                ("Bill to", inv.buyer_name),
                ("Currency", inv.currency),
            ):
                pdf.drawString(x, y, f"{label}: {value}")
                y -= LINE
            y -= 10
        else:
            pdf.setFont("Helvetica", 10)
            pdf.drawString(x, y, f"Invoice {inv.invoice_number} (continued)")
            y -= LINE + 10
        y = header_row(y)
        pdf.setFont("Courier", 9)
        for description, quantity, price in rows:
            pdf.drawString(x, y,
                           table_line((description, str(quantity), _money(Decimal(price)), _money(next(amounts)))))
            y -= LINE
        if number == len(pages):
            y -= 10
            for label, value in (("Subtotal", inv.subtotal()), ("Tax", inv.tax()), ("Total", inv.total())):
                pdf.setFont("Helvetica-Bold" if label == "Total" else "Helvetica", 10)
                pdf.drawString(x, y, f"{label}: {_money(value)}")
                y -= LINE
            pdf.setFont("Helvetica", 9)
            pdf.drawString(x, y - 10, "Payment by bank transfer within 30 days. Thank you for your business.")
        pdf.setFont("Helvetica", 8)
        pdf.drawString(width - 120, 30, f"Page {number} of {len(pages)}")
        pdf.showPage()
    pdf.save()


def write_receipt(rec: Receipt, path: Path) -> None:
    """A till receipt on an 80 mm wide strip."""
    width, height = 80 * mm, 160 * mm
    pdf = canvas.Canvas(str(path), pagesize=(width, height), invariant=1)
    pdf.setTitle(f"Receipt {rec.receipt_number}")
    y = height - 40
    pdf.setFont("Helvetica-Bold", 14)
    pdf.drawString(14, y, rec.merchant)
    y -= 26

    def line(left: str, right: str = "", bold: bool = False) -> None:
        # A till prints fixed-width lines: one string each, so the text layer keeps them whole.
        nonlocal y
        pdf.setFont("Courier-Bold" if bold else "Courier", 8)
        pdf.drawString(14, y, f"{left:<30}{right:>10}" if right else left)
        y -= 16

    line(f"Merchant: {rec.merchant}")
    line(f"Receipt number: {rec.receipt_number}")
    line(f"Date: {rec.date.strftime('%d.%m.%Y')}")
    y -= 6
    line("Description", "Amount", bold=True)
    for description, amount in rec.items:
        line(description, amount)
    y -= 6
    line("Total:", _money(rec.total()), bold=True)
    line(f"Paid by: {rec.payment_method}")
    line(rec.note)
    pdf.showPage()
    pdf.save()


def write_letter(doc: Letter, path: Path) -> None:
    """A one-page note of no known class."""
    pdf = canvas.Canvas(str(path), pagesize=A4, invariant=1)
    _, height = A4
    pdf.setFont("Helvetica-Bold", 16)
    pdf.drawString(60, height - 80, doc.title)
    pdf.setFont("Helvetica", 11)
    y = height - 120
    for paragraph in doc.paragraphs:
        pdf.drawString(60, y, paragraph)
        y -= 30
    pdf.showPage()
    pdf.save()


def write(documents: list, folder: Path) -> dict[str, dict]:
    """Write ``documents`` into ``folder``; return the truth by file name."""
    folder.mkdir(parents=True, exist_ok=True)
    truth = {}
    for doc in documents:
        path = folder / doc.file
        if isinstance(doc, Invoice):
            write_invoice(doc, path)
        elif isinstance(doc, Receipt):
            write_receipt(doc, path)
        else:
            write_letter(doc, path)
        truth[doc.file] = doc.truth()
    return truth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(REPO / "samples"), help="folder for the PDFs")
    parser.add_argument("truth", nargs="?", default=str(REPO / "examples" / "fields-truth.json"))
    parser.add_argument("--extra", action="store_true", help="also write the documents only the tests use")
    args = parser.parse_args(argv)
    documents = SAMPLES + (EXTRA if args.extra else [])
    truth = write(documents, Path(args.out))
    Path(args.truth).parent.mkdir(parents=True, exist_ok=True)
    Path(args.truth).write_text(json.dumps(truth, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(truth)} documents to {args.out} and their values to {args.truth}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
