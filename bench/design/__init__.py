"""Design: which runs a command asks for. The grid of methods x options x seeds, validation walks, star designs."""
