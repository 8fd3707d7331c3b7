"""Reading a report page as a reader sees it: its text, its numbers and their significant digits."""

from __future__ import annotations

import html
import re

NUMBER = re.compile(r"(?<![\w.\-])-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?(?![\w])")


REPR = re.compile(r"\b(?:None|True|False|nan|NaN|inf)\b|\{'|\['|\bdict\(|\bdatetime\.")


def _text(page: str) -> str:
    """What a reader sees, tooltips included: the page without its style and its tags, entities decoded."""
    body = re.sub(r"<style>.*?</style>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def _significant(token: str) -> int:
    mantissa = token.lstrip("-").replace(",", "").split("e")[0]
    digits = mantissa.replace(".", "").lstrip("0")
    if "." not in mantissa:
        digits = digits.rstrip("0")  # an integer's trailing zeros are not significant
    return len(digits)
