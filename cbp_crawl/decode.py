"""How the crawler reads a page's bytes as text: as a browser guesses the encoding (a BOM, else
UTF-8, else the ``<meta charset>`` among the WHATWG Encoding Standard's, else windows-1252).
"""

from __future__ import annotations

import codecs
import re

__all__ = ["decode_html"]

_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


#: The encodings a ``<meta charset>`` may choose, as the WHATWG Encoding Standard maps them: a
#: label Python's codec registry resolves to a key here decodes with its value; any other label
#: (``utf-7``, ``utf-32``, ``unicode_escape``, ``rot13``, ``hex``, ``base64``...) is ignored, as a
#: browser ignores a label it does not know. ``latin1``/``ascii`` are windows-1252 and a meta
#: ``utf-16`` is UTF-8, as in the standard; GBK and GB2312 are decoded as GB18030, Big5 as
#: Big5-HKSCS, Shift_JIS as windows-31j and EUC-KR as windows-949 (the standard's decoders).
_META_ENCODINGS = {
    **{
        n: n
        for n in (
            "cp866",
            "koi8-r",
            "koi8-u",
            "mac-roman",
            "mac-cyrillic",
            "gb18030",
            "euc_jp",
            "iso2022_jp",
            *(f"iso8859-{i}" for i in (2, 3, 4, 5, 6, 7, 8, 10, 13, 14, 15, 16)),
            *(f"cp{i}" for i in range(1250, 1259)),
        )
    },
    "iso8859-1": "cp1252",
    "ascii": "cp1252",
    "iso8859-9": "cp1254",
    "iso8859-11": "cp874",
    "cp874": "cp874",
    "tis-620": "cp874",
    "gbk": "gb18030",
    "gb2312": "gb18030",
    "big5": "big5hkscs",
    "big5hkscs": "big5hkscs",
    "shift_jis": "cp932",
    "cp932": "cp932",
    "euc_kr": "cp949",
    "cp949": "cp949",
    "utf-8": "utf-8",
    "utf-16": "utf-8",
    "utf-16-le": "utf-8",
    "utf-16-be": "utf-8",
}
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def decode_html(data: bytes, truncated: bool = False) -> str:
    """Bytes of a page -> text, as a browser would guess: BOM, else UTF-8, else the ``<meta charset>``
    (an encoding of the WHATWG Encoding Standard), else windows-1252.

    Never raises, and the text never holds a lone surrogate; undecodable bytes become U+FFFD. A
    ``truncated`` page is UTF-8 if it is up to a character cut at its end.

        >>> decode_html(b"caf\\xc3\\xa9"), decode_html(b'<meta charset="latin-1">caf\\xe9')[-4:]
        ('café', 'café')
        >>> decode_html(b"caf\\xe9 \\x81") == "café \\ufffd", decode_html(b"caf\\xc3\\xa9 \\xc3", truncated=True)
        (True, 'café ')
        >>> decode_html(b'<meta charset="unicode_escape">\\\\ud800\\xff')[-7:]  # not the web's: windows-1252
        '\\\\ud800ÿ'
    """
    for bom, enc in (
        (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
    ):
        if data.startswith(bom):
            return _no_surrogates(data[len(bom) :].decode(enc, errors="replace"))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if truncated and e.start >= len(data) - 3 and e.reason == "unexpected end of data":
            return data[: e.start].decode("utf-8")  # UTF-8 cut inside its last character
    enc = "cp1252"
    m = _META_CHARSET.search(data[:4096])
    if m:
        try:
            enc = _META_ENCODINGS.get(codecs.lookup(m.group(1).decode("ascii").strip().lower()).name, enc)
        except (LookupError, UnicodeError, ValueError):
            pass
    try:
        return _no_surrogates(data.decode(enc, errors="replace"))
    except Exception:  # noqa: BLE001 -- a codec's own failure: the page is still text
        return data.decode("cp1252", errors="replace")


def _no_surrogates(text: str) -> str:
    return text if text.isascii() or not _LONE_SURROGATE.search(text) else _LONE_SURROGATE.sub("\ufffd", text)
