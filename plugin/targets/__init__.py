"""Targets backed by files rather than a live process: an ELF or Mach-O file
laid out as the loader would, for the offline command and the unit tests."""
