"""``python -m cbp.errorcodes``: print the error-code page (``> docs/reference/error-codes.md``)."""

import sys

from . import markdown

sys.stdout.write(markdown())
