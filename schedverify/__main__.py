import sys

try:
    from .cli import EXIT_INTERRUPTED, main
except KeyboardInterrupt:  # Ctrl-C while Python still imports the command line: answered as in it
    print("interrupted", file=sys.stderr)
    sys.exit(130)

try:
    main()
except KeyboardInterrupt:  # before the command's own handler is in place
    print("interrupted", file=sys.stderr)
    sys.exit(EXIT_INTERRUPTED)
