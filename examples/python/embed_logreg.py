#!/usr/bin/env python3
"""A Python application that joins a Shoal federation with its own model and training code,
through libshoal's C ABI (shoal/shoal.h) with ctypes: the standard library only, no numpy.

The model is multinomial logistic regression in plain Python (lists and array('f')); its
layout matches the aggregator's `--model linear`: fc0.weight [dim, classes] then fc0.bias.

    shoal-aggregator --listen tcp://127.0.0.1:7070 --model linear --min-clients 2 --rounds 20
    python3 embed_logreg.py --connect tcp://127.0.0.1:7070 --partition 0/2
    python3 embed_logreg.py --connect tcp://127.0.0.1:7070 --partition 1/2

libshoal.so is found through $SHOAL_LIBRARY, then the build tree next to this file, then the
system's library path (an installed Shoal).
"""
import argparse
import ctypes
import ctypes.util
import math
import os
import random
import sys
import threading
from array import array

# ---- the C ABI, declared once ----------------------------------------------------------------

ABI_VERSION = 3
TRAINER_VERSION = 1
OK, INVALID_ARGUMENT, NOT_FOUND, INTERNAL, CANCELLED = 0, 1, 2, 9, 7
EVENT_CONNECTED, EVENT_ROUND_DONE, EVENT_FINISHED = 0, 3, 5

c_char_p, c_void_p, c_size_t, c_int, c_double, c_float = (ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                                                         ctypes.c_int, ctypes.c_double, ctypes.c_float)
c_u32, c_u64 = ctypes.c_uint32, ctypes.c_uint64


class Tensor(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("offset", c_size_t), ("size", c_size_t), ("rank", c_size_t),
                ("shape", ctypes.POINTER(ctypes.c_int64))]


class Task(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("model", c_char_p), ("dataset", c_char_p), ("num_params", c_size_t),
                ("num_tensors", c_size_t), ("tensors", ctypes.POINTER(Tensor)), ("optimizer", c_char_p),
                ("learning_rate", c_float), ("momentum", c_float), ("weight_decay", c_float),
                ("local_epochs", c_u32), ("local_steps", c_u32), ("batch_size", c_u32), ("seed", c_u64),
                ("test_fraction", c_double)]


class Round(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("round", c_u64), ("learning_rate", c_float), ("local_epochs", c_u32),
                ("local_steps", c_u32), ("prox_mu", c_float)]


class Event(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("kind", c_int), ("round", c_u64), ("progress", c_float),
                ("train_loss", c_double), ("bytes_sent", c_u64), ("bytes_received", c_u64), ("seconds", c_double),
                ("message", c_char_p)]


CONFIGURE = ctypes.CFUNCTYPE(c_int, c_void_p, ctypes.POINTER(Task), c_void_p, c_size_t)
SET_PARAMS = ctypes.CFUNCTYPE(c_int, c_void_p, ctypes.POINTER(c_float), c_size_t, c_void_p, c_size_t)
GET_PARAMS = ctypes.CFUNCTYPE(c_int, c_void_p, ctypes.POINTER(c_float), c_size_t, c_void_p, c_size_t)
TRAIN = ctypes.CFUNCTYPE(c_int, c_void_p, ctypes.POINTER(Round), c_void_p, ctypes.POINTER(c_u64),
                         ctypes.POINTER(c_double), c_void_p, c_size_t)
EVALUATE = ctypes.CFUNCTYPE(c_int, c_void_p, ctypes.POINTER(c_double), ctypes.POINTER(c_double),
                            ctypes.POINTER(c_u64), c_void_p, c_size_t)
DESTROY = ctypes.CFUNCTYPE(None, c_void_p)
ON_EVENT = ctypes.CFUNCTYPE(None, c_void_p, ctypes.POINTER(Event))


class Trainer(ctypes.Structure):
    _fields_ = [("version", c_u32), ("user", c_void_p), ("name", c_char_p), ("num_examples", c_u64),
                ("configure", CONFIGURE), ("set_parameters", SET_PARAMS), ("get_parameters", GET_PARAMS),
                ("train", TRAIN), ("evaluate", EVALUATE), ("destroy", DESTROY)]


class ClientOptions(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("connect", c_char_p), ("name", c_char_p), ("secret_key_file", c_char_p),
                ("server_key", c_char_p), ("insecure", c_int), ("connect_timeout_ms", c_u32),
                ("reconnect_timeout_ms", c_u32), ("max_handshake_failures", c_u32), ("on_event", ON_EVENT),
                ("event_user", c_void_p)]


def load_library():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("SHOAL_LIBRARY"), os.path.join(here, "..", "..", "build", "lib", "libshoal.so"),
                  ctypes.util.find_library("shoal")]
    for path in candidates:
        if path and (os.path.exists(path) or not os.path.isabs(path)):
            try:
                lib = ctypes.CDLL(path)
                break
            except OSError:
                continue
    else:
        sys.exit("embed_logreg.py: libshoal.so not found; set SHOAL_LIBRARY or build Shoal (scripts/build)")
    sigs = {
        "shoal_abi_version": (c_int, []),
        "shoal_last_error": (c_char_p, []),
        "shoal_client_options_init": (c_int, [ctypes.POINTER(ClientOptions), c_size_t]),
        "shoal_client_create": (c_int, [ctypes.POINTER(ClientOptions), ctypes.POINTER(c_void_p)]),
        "shoal_client_set_trainer": (c_int, [c_void_p, ctypes.POINTER(Trainer)]),
        "shoal_client_run": (c_int, [c_void_p]),
        "shoal_client_cancel": (c_int, [c_void_p]),
        "shoal_client_last_error": (c_char_p, [c_void_p]),
        "shoal_client_destroy": (None, [c_void_p]),
        "shoal_train_cancelled": (c_int, [c_void_p]),
        "shoal_train_progress": (None, [c_void_p, c_float]),
        "shoal_dataset_load": (c_int, [c_char_p, c_char_p, c_u64, c_double, c_u32, c_u32, c_char_p,
                                       ctypes.POINTER(c_void_p)]),
        "shoal_dataset_rows": (c_size_t, [c_void_p]),
        "shoal_dataset_dim": (c_size_t, [c_void_p]),
        "shoal_dataset_classes": (c_u32, [c_void_p]),
        "shoal_dataset_features": (ctypes.POINTER(c_float), [c_void_p]),
        "shoal_dataset_labels": (ctypes.POINTER(ctypes.c_int32), [c_void_p]),
        "shoal_dataset_destroy": (None, [c_void_p]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    if lib.shoal_abi_version() != ABI_VERSION:
        sys.exit(f"embed_logreg.py: written for Shoal ABI {ABI_VERSION}, the library has {lib.shoal_abi_version()}")
    return lib


def write_error(buf, size, text):
    data = text.encode()[: max(size - 1, 0)] + b"\0"
    ctypes.memmove(buf, data, len(data))


# ---- the application's model: logistic regression in plain Python ---------------------------

class LogisticRegression:
    def __init__(self, lib, dataset, part, parts):
        self.lib, self.dataset, self.part, self.parts = lib, dataset, part, parts
        self.x, self.y, self.w = [], [], array("f")
        self.dim = self.classes = 0

    def configure(self, task):
        handle = c_void_p()
        if self.lib.shoal_dataset_load(self.dataset.encode(), None, task.seed, task.test_fraction, self.part,
                                       self.parts, b"iid", ctypes.byref(handle)) != OK:
            return NOT_FOUND, "loading " + self.dataset + ": " + self.lib.shoal_last_error().decode()
        rows, dim = self.lib.shoal_dataset_rows(handle), self.lib.shoal_dataset_dim(handle)
        self.classes = self.lib.shoal_dataset_classes(handle)
        feats, labels = self.lib.shoal_dataset_features(handle), self.lib.shoal_dataset_labels(handle)
        self.x = [feats[r * dim:(r + 1) * dim] for r in range(rows)]
        self.y = labels[:rows]
        self.dim = dim
        self.lib.shoal_dataset_destroy(handle)
        t = task.tensors
        shapes = [tuple(t[i].shape[j] for j in range(t[i].rank)) for i in range(task.num_tensors)]
        if shapes != [(dim, self.classes), (self.classes,)]:
            return INVALID_ARGUMENT, (f"this application trains logistic regression (fc0.weight[{dim},{self.classes}] "
                                      f"fc0.bias[{self.classes}]); the aggregator's model '{task.model.decode()}' "
                                      f"has {shapes}. Start the aggregator with --model linear")
        self.w = array("f", bytes(4 * task.num_params))
        self.batch, self.seed = task.batch_size or 32, task.seed
        return OK, ""

    def probabilities(self, x):
        k, d, w = self.classes, self.dim, self.w
        z = [w[d * k + c] + sum(x[j] * w[j * k + c] for j in range(d)) for c in range(k)]
        m = max(z)
        e = [math.exp(v - m) for v in z]
        s = sum(e)
        return [v / s for v in e]

    def train(self, rnd, cancelled, progress):
        k, d, n = self.classes, self.dim, len(self.x)
        order = list(range(n))
        rng = random.Random(self.seed * 7919 + rnd.round * 104729 + self.part)
        per_epoch = (n + self.batch - 1) // self.batch
        total = rnd.local_steps or per_epoch * rnd.local_epochs
        loss, seen = 0.0, 0
        for step in range(total):
            if cancelled():
                return None
            if step % per_epoch == 0:
                rng.shuffle(order)
            batch = order[(step % per_epoch) * self.batch:(step % per_epoch + 1) * self.batch]
            grad = [0.0] * len(self.w)
            for i in batch:
                x, y = self.x[i], self.y[i]
                p = self.probabilities(x)
                loss -= math.log(max(p[y], 1e-300))
                for c in range(k):  # dL/dz = softmax - onehot; dW = x dz; db = dz
                    dz = p[c] - (1.0 if c == y else 0.0)
                    for j in range(d):
                        grad[j * k + c] += x[j] * dz
                    grad[d * k + c] += dz
            scale = rnd.learning_rate / len(batch)
            for i, g in enumerate(grad):
                self.w[i] -= scale * g
            seen += len(batch)
            progress((step + 1) / total)
        return seen, loss / max(seen, 1)

    def evaluate(self):
        loss, right = 0.0, 0
        for x, y in zip(self.x, self.y):
            p = self.probabilities(x)
            loss -= math.log(max(p[y], 1e-300))
            right += max(range(self.classes), key=p.__getitem__) == y
        n = max(len(self.x), 1)
        return loss / n, right / n, len(self.x)


def make_trainer(lib, model):
    """The shoal_trainer callbacks around `model`. Every callback catches everything: an
    exception must become an error status, never unwind into C."""
    def guard(fn):
        def wrapped(*args):
            error, size = args[-2], args[-1]
            try:
                code, text = fn(*args[:-2])
            except Exception as e:  # noqa: BLE001 - reported to Shoal as the callback's failure
                code, text = INTERNAL, f"{type(e).__name__}: {e}"
            if code != OK:
                write_error(error, size, text)
            return code
        return wrapped

    def configure(_user, task):
        return model.configure(task.contents)

    def set_parameters(_user, params, count):
        if count != len(model.w):
            return INVALID_ARGUMENT, f"got {count} parameters, the model has {len(model.w)}"
        ctypes.memmove(model.w.buffer_info()[0], params, 4 * count)
        return OK, ""

    def get_parameters(_user, params, count):
        if count != len(model.w):
            return INVALID_ARGUMENT, f"asked for {count} parameters, the model has {len(model.w)}"
        ctypes.memmove(params, model.w.buffer_info()[0], 4 * count)
        return OK, ""

    def train(_user, rnd, context, num_examples, train_loss):
        result = model.train(rnd.contents, lambda: lib.shoal_train_cancelled(context) != 0,
                             lambda f: lib.shoal_train_progress(context, f))
        if result is None:
            return CANCELLED, "cancelled"
        num_examples[0], train_loss[0] = result
        return OK, ""

    def evaluate(_user, loss, accuracy, num_examples):
        loss[0], accuracy[0], num_examples[0] = model.evaluate()
        return OK, ""

    t = Trainer()
    t.version = TRAINER_VERSION
    t.name = b"logreg-python"
    t.configure = CONFIGURE(guard(configure))
    t.set_parameters = SET_PARAMS(guard(set_parameters))
    t.get_parameters = GET_PARAMS(guard(get_parameters))
    t.train = TRAIN(guard(train))
    t.evaluate = EVALUATE(guard(evaluate))
    return t  # keep it alive while the client runs: it owns the callback thunks


def run_interruptibly(lib, client):
    """shoal_client_run on a thread of its own, so that Python's main thread stays free to take
    Ctrl-C (a signal reaches Python only between bytecodes, never inside a foreign call); the
    interrupt cancels the client, which is thread-safe. Waits on an Event, not Thread.join:
    an interrupted join can leave the thread looking finished."""
    result = []
    done = threading.Event()

    def run():
        try:
            result.append(lib.shoal_client_run(client))
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        print("embed_logreg.py: interrupted; cancelling", file=sys.stderr, flush=True)
        lib.shoal_client_cancel(client)
        done.wait()
    return result[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connect", default="tcp://127.0.0.1:7070")
    ap.add_argument("--partition", default="0/1", help="this client's part i/n, 0-based")
    ap.add_argument("--dataset", default="digits", help="digits or csv:PATH")
    ap.add_argument("--name")
    ap.add_argument("--secret-key")
    ap.add_argument("--server-key")
    a = ap.parse_args()
    try:
        part, parts = (int(v) for v in a.partition.split("/"))
        assert 0 <= part < parts
    except (ValueError, AssertionError):
        ap.error("--partition must be i/n with 0 <= i < n")

    lib = load_library()

    def on_event(_user, event):
        e = event.contents
        if e.kind == EVENT_CONNECTED:
            print(e.message.decode(), flush=True)
        elif e.kind == EVENT_ROUND_DONE:
            print(f"round {e.round}: train_loss {e.train_loss:.4f}, {e.seconds:.2f} s", flush=True)
        elif e.kind == EVENT_FINISHED:
            print("finished: " + e.message.decode(), flush=True)

    events = ON_EVENT(on_event)
    options = ClientOptions()
    if lib.shoal_client_options_init(ctypes.byref(options), ctypes.sizeof(options)) != OK:
        sys.exit("embed_logreg.py: error: " + lib.shoal_last_error().decode())
    options.connect = a.connect.encode()
    options.name = (a.name or f"logreg-py-{part}").encode()
    options.secret_key_file = a.secret_key.encode() if a.secret_key else None
    options.server_key = a.server_key.encode() if a.server_key else None
    options.on_event = events
    client = c_void_p()
    if lib.shoal_client_create(ctypes.byref(options), ctypes.byref(client)) != OK:
        sys.exit("embed_logreg.py: error: " + lib.shoal_last_error().decode())
    trainer = make_trainer(lib, LogisticRegression(lib, a.dataset, part, parts))
    status = lib.shoal_client_set_trainer(client, ctypes.byref(trainer))
    if status == OK:
        status = run_interruptibly(lib, client)
    if status != OK:
        print("embed_logreg.py: error: " + lib.shoal_client_last_error(client).decode(), file=sys.stderr)
    lib.shoal_client_destroy(client)
    return 0 if status == OK else 1


if __name__ == "__main__":
    sys.exit(main())
