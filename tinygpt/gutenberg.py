"""Download the Holmes corpus of the series from Project Gutenberg.

Nine books, license header and footer removed, CRLF turned into LF, joined by a
blank line, in the series' order (see :data:`HOLMES_BOOKS`).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from .files import write_atomically

HOLMES_BOOKS: list[tuple[int, str]] = [
    (244, "A Study in Scarlet"),
    (2097, "The Sign of the Four"),
    (1661, "The Adventures of Sherlock Holmes"),
    (834, "The Memoirs of Sherlock Holmes"),
    (2852, "The Hound of the Baskervilles"),
    (108, "The Return of Sherlock Holmes"),
    (3289, "The Valley of Fear"),
    (2350, "His Last Bow"),
    (69700, "The Case-Book of Sherlock Holmes"),
]
GUTENBERG_URL = "https://www.gutenberg.org/cache/epub/{id}/pg{id}.txt"

_START, _END = "*** START OF", "*** END OF"


class DownloadError(RuntimeError):
    """The corpus could not be fetched; the message says how to supply it by hand."""


def strip_gutenberg(text: str) -> str:
    """The book between the ``*** START OF ...`` and ``*** END OF ...`` lines, LF line ends.

    >>> strip_gutenberg("header\\r\\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\\r\\nBody.\\r\\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\\r\\nfooter")
    'Body.'
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    start = text.find(_START)
    if start != -1:
        text = text[text.index("\n", start) + 1 :] if "\n" in text[start:] else ""
    end = text.find(_END)
    if end != -1:
        text = text[:end]
    return text.strip("\n").rstrip()


def fetch_book(book_id: int, url_template: str = GUTENBERG_URL, timeout: float = 30.0) -> str:
    url = url_template.format(id=book_id)
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8-sig")


def download_holmes(out: str | Path, url_template: str = GUTENBERG_URL, timeout: float = 30.0) -> Path:
    """Fetch the nine books and write the corpus to ``out`` (atomically)."""
    out = Path(out)
    books = []
    for book_id, title in HOLMES_BOOKS:
        try:
            books.append(strip_gutenberg(fetch_book(book_id, url_template, timeout)))
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DownloadError(
                f"could not download {title!r} (Gutenberg #{book_id}): {reason}. "
                "Offline? Copy a UTF-8 corpus to the machine and pass it with --corpus, "
                "or set TINYGPT_HOLMES_PATH to the path of holmes.txt"
            ) from None
    write_atomically(out, lambda tmp: tmp.write_text("\n\n".join(books) + "\n", encoding="utf-8"))
    return out
