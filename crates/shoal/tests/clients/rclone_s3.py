"""rclone (Debian's package, its S3 backend as for "Other" providers)
against the gateway: a tree with nested directories, empty and
multipart-sized files synced up, checked by hash, changed and synced again
(only the changes go; a deleted file goes from the bucket), copied back
and compared byte for byte, copied server-side, then deleted with the
bucket.

Run by crates/shoal/tests/gateway.rs with GW_ENDPOINT, GW_KEY, GW_SECRET.
Exits non-zero with the failed check on the first failure.
"""
import filecmp
import os
import subprocess
import tempfile

env = dict(
    os.environ,
    RCLONE_CONFIG_SHOAL_TYPE="s3",
    RCLONE_CONFIG_SHOAL_PROVIDER="Other",
    RCLONE_CONFIG_SHOAL_ENDPOINT=os.environ["GW_ENDPOINT"],
    RCLONE_CONFIG_SHOAL_ACCESS_KEY_ID=os.environ["GW_KEY"],
    RCLONE_CONFIG_SHOAL_SECRET_ACCESS_KEY=os.environ["GW_SECRET"],
    RCLONE_CONFIG_SHOAL_REGION="us-east-1",
    RCLONE_CONFIG_SHOAL_FORCE_PATH_STYLE="true",
    # Multipart from 5 MiB up, so that the 12 MiB file goes in parts.
    RCLONE_S3_UPLOAD_CUTOFF="5M",
    RCLONE_S3_CHUNK_SIZE="5M",
    RCLONE_CONFIG="/dev/null",
)
# The endpoint is plain HTTP: a CA bundle the machine names for AWS's SDKs
# only makes rclone's S3 client refuse to start.
env.pop("AWS_CA_BUNDLE", None)


def rclone(*args):
    r = subprocess.run(["rclone", "--retries", "1", "--low-level-retries", "2", *args],
                       env=env, capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise SystemExit(f"rclone {' '.join(args)} failed ({r.returncode}):\n"
                         f"{r.stdout}\n{r.stderr}")
    return r.stdout + r.stderr


def same_trees(a, b):
    cmp = filecmp.dircmp(a, b)
    stack = [cmp]
    while stack:
        c = stack.pop()
        assert not c.left_only and not c.right_only, (c.left, c.left_only, c.right_only)
        _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
        assert not mismatch and not errors, (c.left, mismatch, errors)
        stack.extend(c.subdirs.values())


work = tempfile.mkdtemp(prefix="rclone-")
tree = os.path.join(work, "tree")
for d in ["", "a", "a/b", "a/b/c", "empty-file-dir"]:
    os.makedirs(os.path.join(tree, d), exist_ok=True)
for i, d in enumerate(["", "a", "a/b", "a/b/c"]):
    for j in range(3):
        with open(os.path.join(tree, d, f"f{i}{j}.bin"), "wb") as f:
            f.write(os.urandom(100 * (i + 1) + j))
open(os.path.join(tree, "empty-file-dir", "empty"), "wb").close()
with open(os.path.join(tree, "a", "big.bin"), "wb") as f:
    f.write(os.urandom(12 * 1024 * 1024 + 7))
with open(os.path.join(tree, "a", "name with spaces & ünïcode.txt"), "w") as f:
    f.write("spaces")

B = "shoal:rclone-bucket"
rclone("mkdir", B)
rclone("sync", tree, f"{B}/tree")
rclone("check", tree, f"{B}/tree")
listed = rclone("lsf", "-R", "--files-only", f"{B}/tree").split("\n")
assert "a/big.bin" in listed and "empty-file-dir/empty" in listed, listed

# Change one file, remove one, add one: the next sync moves only those.
with open(os.path.join(tree, "f00.bin"), "wb") as f:
    f.write(b"changed")
os.remove(os.path.join(tree, "a", "b", "f21.bin"))
with open(os.path.join(tree, "a", "new.txt"), "w") as f:
    f.write("new")
out = rclone("sync", "-v", tree, f"{B}/tree")
assert "f00.bin" in out and "new.txt" in out and "f21.bin" in out, out
assert "big.bin" not in out, out
rclone("check", tree, f"{B}/tree")
assert "a/b/f21.bin" not in rclone("lsf", "-R", f"{B}/tree").split("\n")

# Back down, byte for byte.
back = os.path.join(work, "back")
rclone("copy", f"{B}/tree", back)
same_trees(tree, back)

# Server-side copy (CopyObject) and a move within the bucket.
rclone("copyto", f"{B}/tree/a/big.bin", f"{B}/copies/big.bin")
rclone("moveto", f"{B}/tree/a/new.txt", f"{B}/copies/new.txt")
got = os.path.join(work, "big-again.bin")
rclone("copyto", f"{B}/copies/big.bin", got)
assert filecmp.cmp(got, os.path.join(tree, "a", "big.bin"), shallow=False)
assert "new.txt" not in rclone("lsf", f"{B}/tree/a")

# Delete everything, then the bucket.
rclone("delete", f"{B}/tree")
assert rclone("lsf", "-R", "--files-only", f"{B}/tree").strip() == ""
rclone("purge", B)
assert "rclone-bucket" not in rclone("lsd", "shoal:")
print("rclone: ok")
