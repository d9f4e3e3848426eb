"""shoal-report on real runs: shoal-sim twice (dense and int8 uploads) and a lone shoal-peer.

The PNGs are read back with matplotlib and checked: their size, a white background, each
run's line colour inside the axes, and that the accuracy curve of a run that learns rises
from left to right. The summaries carry each run's final accuracy; bad input is refused.

    python3 tests/report/report_test.py BIN_DIR
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

import matplotlib

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import numpy as np  # noqa: E402

BIN = None
WIDTH, HEIGHT = 900, 500
C0 = np.array([0x1F, 0x77, 0xB4]) / 255.0  # matplotlib's first two cycle colours
C1 = np.array([0xFF, 0x7F, 0x0E]) / 255.0


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


def colour_mask(image, colour):
    return np.all(np.abs(image[:, :, :3] - colour) < 0.03, axis=2)


class Report(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="shoal-report-test-")
        cls.sims = []
        for name, codec in (("dense", "none"), ("int8", "int8")):
            path = os.path.join(cls.dir, name + ".jsonl")
            r = run([os.path.join(BIN, "shoal-sim"), "--clients", "20", "--fraction", "0.5", "--rounds", "12",
                     "--model", "mlp:32", "--lr", "0.1", "--momentum", "0.9", "--seed", "3", "--codec", codec,
                     "--metrics-out", path])
            assert r.returncode == 0, r.stderr
            cls.sims.append(path)
        cls.out = os.path.join(cls.dir, "report")
        cls.result = run([os.path.join(BIN, "shoal-report"), *cls.sims, "-o", cls.out])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def image(self, name):
        path = os.path.join(self.out, name)
        self.assertTrue(os.path.getsize(path) > 10000, name)
        return matplotlib.image.imread(path)

    def test_plots_are_drawn_with_every_run(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        self.assertEqual(self.result.stdout.strip(), os.path.join(self.out, "index.html"))
        for name in ("accuracy.png", "loss.png", "bytes.png", "bytes_vs_accuracy.png"):
            img = self.image(name)
            self.assertEqual(img.shape[:2], (HEIGHT, WIDTH), name)
            self.assertTrue(np.all(img[0:5, 0:5, :3] > 0.99), f"{name}: a white background")
            # Both runs' lines. int8 is drawn last and can hide dense where they learn alike;
            # on the bytes plots they part (int8 sends about a quarter of the upload bytes).
            self.assertGreater(colour_mask(img, C1).sum(), 200, name)
            self.assertGreater(colour_mask(img, C0).sum(), 200 if name.startswith("bytes") else 40, name)
        self.assertFalse(os.path.exists(os.path.join(self.out, "steps.png")), "no peer run, no step plot")

    def test_the_accuracy_curve_rises(self):
        img = self.image("accuracy.png")
        rows, cols = np.nonzero(colour_mask(img, C1))
        # Leave out the legend (lower right) and the dotted majority-class line (the row most
        # of the colour's pixels share): the curve's leftmost and rightmost points remain.
        dotted = np.bincount(rows).argmax()
        self.assertGreater(np.sum(rows == dotted), 40, "the majority-class line is drawn")
        keep = (cols < WIDTH * 0.6) & (np.abs(rows - dotted) > 3)
        rows, cols = rows[keep], cols[keep]
        left = rows[cols < np.percentile(cols, 10)].mean()
        right = rows[cols > np.percentile(cols, 90)].mean()
        self.assertLess(right, left, "accuracy rises: the curve ends higher (smaller row) than it starts")

    def test_summaries_carry_each_runs_figures(self):
        with open(os.path.join(self.out, "REPORT.md")) as f:
            md = f.read()
        with open(os.path.join(self.out, "index.html")) as f:
            page = f.read()
        for path in self.sims:
            with open(path) as f:
                last = json.loads(f.read().strip().split("\n")[-1])
            name = os.path.basename(path)[:-6]
            self.assertIn(f"| {name} | aggregator | 12 | {last['test_accuracy']:.4f} |", md)
            self.assertIn(f"<td>{last['test_accuracy']:.4f}</td>", page)
        self.assertIn("![bytes_vs_accuracy.png](bytes_vs_accuracy.png)", md)
        self.assertEqual(page.count("<tr>"), 3)  # the header and two runs

    def test_a_peer_run_gets_its_step_curves(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        path = os.path.join(self.dir, "peer.jsonl")
        r = run([os.path.join(BIN, "shoal-peer"), "--listen", f"tcp://127.0.0.1:{port}", "--name", "solo",
                 "--steps", "30", "--eval-every", "5", "--model", "mlp:32", "--device", "cpu", "--metrics-out", path])
        self.assertEqual(r.returncode, 0, r.stderr)
        out = os.path.join(self.dir, "peer-report")
        r = run([os.path.join(BIN, "shoal-report"), path, "-o", out, "--name", "solo peer"])
        self.assertEqual(r.returncode, 0, r.stderr)
        img = matplotlib.image.imread(os.path.join(out, "steps.png"))
        self.assertEqual(img.shape[:2], (HEIGHT, WIDTH))
        self.assertGreater(colour_mask(img, C0).sum(), 200)
        with open(os.path.join(out, "REPORT.md")) as f:
            self.assertIn("| solo peer | peer | 30 |", f.read())

    def test_bad_input_is_refused_with_the_place(self):
        missing = os.path.join(self.dir, "nothing.jsonl")
        r = run([os.path.join(BIN, "shoal-report"), missing, "-o", os.path.join(self.dir, "x")])
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"cannot read {missing}", r.stderr)
        with open(self.sims[0]) as f:
            lines = f.read().strip().split("\n")
        broken = os.path.join(self.dir, "broken.jsonl")
        with open(broken, "w") as f:
            f.write("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
        r = run([os.path.join(BIN, "shoal-report"), broken, "-o", os.path.join(self.dir, "y")])
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"{broken}:2: not a metrics line", r.stderr)
        # A run still being written: its truncated last line is skipped, with a warning.
        growing = os.path.join(self.dir, "growing.jsonl")
        with open(growing, "w") as f:
            f.write("\n".join(lines) + "\n" + lines[-1][:20])
        r = run([os.path.join(BIN, "shoal-report"), growing, "-o", os.path.join(self.dir, "z")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("skipped a truncated last line", r.stderr)


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
