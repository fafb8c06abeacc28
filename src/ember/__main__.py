"""Command line: ``python -m ember demo`` runs the demonstration."""

import sys


def main() -> int:
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m ember demo [--steps N] [--backend numpy|native]\n"
              "       python -m ember demo gpt2 [--layers N] [--new N]")
        return 0 if args else 2
    if args[0] == "demo" and args[1:2] == ["gpt2"]:
        from ember._src.demo_gpt2 import main as gpt2_main
        return gpt2_main(args[2:])
    if args[0] == "demo":
        from ember._src.demo import main as demo_main
        return demo_main(args[1:])
    print(f"unknown command {args[0]!r}; try `python -m ember demo`")
    return 2


if __name__ == "__main__":
    sys.exit(main())
