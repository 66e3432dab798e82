"""One module per subcommand (as pre-commit does): each has ``register(subparsers)`` and
``run(args, log)``."""
