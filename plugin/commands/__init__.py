"""What each command computes, shared by the GDB, LLDB and offline front-ends:
they gather registers and settings, call here, and print what comes back."""
