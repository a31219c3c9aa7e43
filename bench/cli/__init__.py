"""The command line: one module per command, each with add_parser(sub) and run(args); main.py dispatches."""
