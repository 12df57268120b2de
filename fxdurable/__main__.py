import sys

from fxdurable.cli.main import main

sys.exit(main())
