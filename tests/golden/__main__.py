"""``python3 -m tests.golden [--write]``: compare the generated sources with the golden files
(exit 1 and name what differs), or regenerate them."""
import sys

from tests.golden import generate, stored, write

if "--write" in sys.argv:
    write()
    print("golden sources written")
    sys.exit(0)
new, old = generate(), stored()
changed = sorted(k for k in set(new[0]) | set(old[0]) if new[0].get(k) != old[0].get(k)) + sorted(
    k for k in set(new[1]) | set(old[1]) if new[1].get(k) != old[1].get(k))
print("\n".join(changed) or "generated sources unchanged")
sys.exit(1 if changed else 0)
