#!/usr/bin/env python3
"""The tables of bench/gpu/ab.sh, from the files it writes in its output folder.

  ab-tables.py means OUT ROUNDS BUILD...
      each build's mean prefill tok/s per prompt length over the rounds (OUT/BUILD-roundR.txt, the output
      of `moelens-gpu-bench prefill`), its ratio to the build named "tree", and the routing each build
      gave in its first round, marking a build that routes otherwise than the tree: the expert kernels'
      time depends on the routing, so such a build was not timed on the same work.
  ab-tables.py decode OUT ROUNDS N,N BUILD...
      each build's mean decode tok/s (the token kept on the device) after prompts of each length N over
      the rounds (OUT/BUILD-decodeN-roundR.txt, the output of `moelens-gpu-bench speed`), its ratio to the
      tree, and per length the digest of the decoded tokens and the launches per token, marking a build
      that decoded other tokens than the tree.
  ab-tables.py kernels OUT BUILD...
      per prompt length, the µs per launch by build of each kernel that takes at least 1 % of some build's
      profiled time (OUT/BUILD-profile.txt, `MOELENS_CUDA_PROFILE=1` output; launches as the tree counts
      them), and each build's profiled total.
"""
import re
import sys


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def means(out, rounds, names):
    tok_s = {}
    for name in names:
        rows = {}
        for r in range(1, rounds + 1):
            for m in re.finditer(r"^\s*(\d+) \|\s*([\d.]+) \|", read(f"{out}/{name}-round{r}.txt") or "", re.M):
                rows.setdefault(int(m.group(1)), []).append(float(m.group(2)))
        tok_s[name] = {n: sum(v) / len(v) for n, v in rows.items()}
    if not tok_s.get("tree"):
        sys.exit(f"ab-tables.py: no timed rounds of the tree in {out}")
    lengths = sorted(tok_s["tree"])
    print("build      " + "".join(f"| {n:>7} tok/s " for n in lengths) + "| against the tree")
    for name in names:
        ratios = [tok_s[name].get(n, 0.0) / tok_s["tree"][n] for n in lengths]
        print(f"{name:10s} " + "".join(f"| {tok_s[name].get(n, 0.0):13.1f} " for n in lengths) +
              "| " + " ".join(f"{100 * (x - 1):+.1f} %" for x in ratios))
    for n in lengths:
        print(f"routing at {n} tokens:")
        routing = {}
        for name in names:
            m = re.search(rf"^routing, {n} tokens: (.*)$", read(f"{out}/{name}-round1.txt") or "", re.M)
            routing[name] = m.group(1) if m else None
            differs = name != "tree" and routing[name] is not None and routing[name] != routing.get("tree")
            mark = "  <- routes otherwise than the tree: its expert kernels did other work" if differs else ""
            print(f"  {name:10s} {routing[name] or '-'}{mark}")


def decode(out, rounds, depths, names):
    runs = {}  # build -> depth -> (tok/s of each round, digest of the first, launches per token of the first)
    for name in names:
        for n in depths:
            tok_s, digest, launches = [], None, None
            for r in range(1, rounds + 1):
                text = read(f"{out}/{name}-decode{n}-round{r}.txt") or ""
                m = re.search(r"^decode, token kept on the device: \d+ tokens, ([\d.]+) tok/s.*digest ([0-9a-f]+)", text, re.M)
                if not m:
                    continue
                tok_s.append(float(m.group(1)))
                digest = digest or m.group(2)
                if launches is None:
                    k = re.search(r"^kernel launches per decoded token: ([\d.]+)", text, re.M)
                    launches = k.group(1) if k else None
            runs.setdefault(name, {})[n] = (tok_s, digest, launches)
    tree = runs.get("tree", {})
    if not any(tok_s for tok_s, _, _ in tree.values()):
        sys.exit(f"ab-tables.py: no timed decode rounds of the tree in {out}")
    mean = lambda v: sum(v) / len(v) if v else 0.0
    print("decode     " + "".join(f"| after {n:>6} tok/s " for n in depths) + "| against the tree")
    for name in names:
        cells = [mean(runs[name][n][0]) for n in depths]
        ratios = [c / mean(tree[n][0]) if mean(tree[n][0]) else 0.0 for c, n in zip(cells, depths)]
        print(f"{name:10s} " + "".join(f"| {c:18.1f} " for c in cells) + "| " +
              " ".join(f"{100 * (x - 1):+.1f} %" for x in ratios))
    for n in depths:
        print(f"decode after {n} tokens (digest, launches per token):")
        for name in names:
            _, digest, launches = runs[name][n]
            differs = name != "tree" and digest is not None and digest != tree[n][1]
            mark = "  <- other tokens than the tree" if differs else ""
            print(f"  {name:10s} {digest or '-'} {launches or '-'}{mark}")


def kernels(out, names):
    per = {}  # build -> tokens -> kernel -> (launches, ms, us)
    for name in names:
        text = read(f"{out}/{name}-profile.txt")
        if text is None:
            continue
        for block in re.split(r"^runtime, fp16, ", text, flags=re.M)[1:]:
            tokens = int(block.split(" ", 1)[0])
            rows = re.findall(r"^\s+(\S+)\s+(\d+) launches\s+([\d.]+) ms GPU\s+([\d.]+) us each", block, re.M)
            per.setdefault(name, {})[tokens] = {k: (int(c), float(ms), float(us)) for k, c, ms, us in rows}
    if "tree" not in per:
        sys.exit(f"ab-tables.py: no profile of the tree in {out}")
    for tokens in per["tree"]:
        builds = [per.get(n, {}).get(tokens, {}) for n in names]
        shown = {}  # kernel -> its largest ms in any build
        for b in builds:
            total = sum(ms for _, ms, _ in b.values())
            for kernel, (_, ms, _) in b.items():
                if ms >= 0.01 * total:
                    shown[kernel] = max(shown.get(kernel, 0.0), ms)
        print(f"\n{f'{tokens} tokens, us per launch':40s}" + "".join(f" | {n:>9s}" for n in names))
        for kernel in sorted(shown, key=lambda k: -shown[k]):
            count = per["tree"][tokens].get(kernel, (0, 0.0, 0.0))[0]
            cells = [f"{b[kernel][2]:9.1f}" if kernel in b else f"{'-':>9s}" for b in builds]
            print(f"  {kernel[:30]:30s} x{count:<6d}" + "".join(f" | {c}" for c in cells))
        print(f"  {'all kernels, ms':38s}" + "".join(f" | {sum(ms for _, ms, _ in b.values()):9.2f}" for b in builds))


def main(argv):
    if len(argv) >= 4 and argv[1] == "means" and argv[3].isdigit():
        means(argv[2], int(argv[3]), argv[4:])
    elif len(argv) >= 5 and argv[1] == "decode" and argv[3].isdigit():
        decode(argv[2], int(argv[3]), [int(n) for n in argv[4].split(",")], argv[5:])
    elif len(argv) >= 3 and argv[1] == "kernels":
        kernels(argv[2], argv[3:])
    else:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
