"""``python -m tl_leadterms.cli``: the ``tl-leadterms`` command."""

import sys

from tl_leadterms.cli import main

if __name__ == "__main__":
    sys.exit(main())
