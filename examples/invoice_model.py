"""The invoice of ``invoice.schema.json`` as a pydantic model, for ``--schema invoice_model:Invoice``
(run from this folder) or ``--schema examples.invoice_model:Invoice`` (from the repository root).

The cross-field checks ride along in ``json_schema_extra``; a pydantic validator runs too: a row
whose answer fails it is ``invalid`` with the validator's message.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class LineItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str
    quantity: float
    unit_price: float
    amount: float


class Invoice(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "x-llm-ocr-checks": [
                {"each": "line_items", "product": ["quantity", "unit_price"], "equals": "amount"},
                {"sum": "line_items[*].amount", "equals": "subtotal"},
                {"sum": ["subtotal", "tax"], "equals": "total"},
            ]
        },
    )

    invoice_number: str = Field(title="Invoice number", pattern=r"^INV-[0-9]{4}-[0-9]{4}$")
    invoice_date: dt.date = Field(title="Invoice date")
    due_date: dt.date | None = Field(None, title="Due date")
    seller_name: str = Field(title="Seller")
    buyer_name: str = Field(title="Bill to")
    currency: Literal["EUR", "USD", "GBP"] = Field(title="Currency")
    line_items: list[LineItem] = Field(title="Line items")
    subtotal: float = Field(title="Subtotal", json_schema_extra={"x-llm-ocr-merge": "last"})
    tax: float = Field(title="Tax", json_schema_extra={"x-llm-ocr-merge": "last"})
    total: float = Field(title="Total", json_schema_extra={"x-llm-ocr-merge": "last"})

    @field_validator("due_date")
    @classmethod
    def _due_after_issue(cls, value: dt.date | None, info) -> dt.date | None:
        issued = info.data.get("invoice_date")
        if value is not None and issued is not None and value < issued:
            raise ValueError("the due date is before the invoice date")
        return value
