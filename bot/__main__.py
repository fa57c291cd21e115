"""`python -m bot ...` is `gpumem ...`."""

import sys

from bot.main import main

sys.exit(main())
