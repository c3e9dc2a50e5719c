"""client_set.py — lct.ClientSet: keys placed over several lctd (one per GPU or host) by liblct's rendezvous hashing."""
import ctypes
import heapq
import os

from . import _native, _values
from .client import Client
from .errors import LctError, error


def endpoints(listed=None):
    """The endpoints of a set as liblct reads them: listed (a list, or a
    comma-separated string), else $LCT_ENDPOINTS, else the one endpoint
    $LCT_ENDPOINT or the default. ValueError for a malformed list."""
    with _Placement(listed) as p:
        return p.endpoints


class _Placement:
    """liblct's lct_client_set, used for its list parsing and placement only:
    the connections are the members' lct.Clients."""

    def __init__(self, listed):
        if isinstance(listed, (list, tuple)):
            listed = ",".join(listed)
        self._lib = _native.lib()
        handle = ctypes.c_void_p()
        rc = self._lib.lct_client_set_open(None, listed.encode() if listed else None, ctypes.byref(handle))
        if rc < 0:
            shown = listed or os.environ.get("LCT_ENDPOINTS") or os.environ.get("LCT_ENDPOINT")
            raise ValueError(f"bad endpoint list {shown!r}: comma-separated 'tcp://HOST:PORT' or 'ipc:///PATH', "
                             f"each once ({error(rc)})")
        self._handle = handle
        self.endpoints = tuple(self._lib.lct_client_set_endpoint(handle, i).decode()
                               for i in range(self._lib.lct_client_set_size(handle)))

    def place(self, key):
        return self._lib.lct_client_set_place(self._handle, _values.key_bytes(key))

    def close(self):
        if self._handle is not None:
            self._lib.lct_client_set_close(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self.close()


class ClientSet:
    """Several lctd as one store: each key lives on the endpoint that
    rendezvous hashing gives it (lct.h: the same endpoint whatever the list's
    order; removing an endpoint moves only its keys), so every client that
    shares keys must list the same endpoint strings. lct.Client(list) makes
    one.

    endpoints: a list of 'tcp://host:port' / 'ipc:///path' strings or one
    comma-separated string; None: $LCT_ENDPOINTS, else $LCT_ENDPOINT or the
    default. options: lct.Client's (auth_token_file, timeout_ms, ...), for
    every member. Each member connects at its first use; one that does not
    answer fails the calls for its keys with an LctError naming the endpoint
    and the key (LCT_ECONN), and is tried again at the next.

    put, get, delete, stat, put_many and get_many go to each key's endpoint;
    list() merges every endpoint's keys in order, stats() adds up their
    counters (stats_by_endpoint() gives each), save() and ping() ask each.
    A trainer rank that keeps its states on one lctd takes
    lct.Client.for_rank() instead.
    """

    def __init__(self, endpoints=None, **options):
        self._placement = _Placement(endpoints)
        self.endpoints = self._placement.endpoints
        self._options = options
        self._members = [None] * len(self.endpoints)

    def __repr__(self):
        return f"<lct.ClientSet of {len(self.endpoints)}: {', '.join(self.endpoints)}>"

    def place(self, key):
        """The index in endpoints of the lctd that holds key."""
        return self._placement.place(key)

    def member(self, index, key=None):
        """The lct.Client of endpoints[index], connected at its first use."""
        client = self._members[index]
        if client is None:
            endpoint = self.endpoints[index]
            try:
                client = Client(endpoint, **self._options)
            except LctError as e:
                where = f"key {key!r} lives at {endpoint}" if key is not None else f"lctd at {endpoint}"
                raise error(e.code, f"{where} (endpoint {index + 1} of {len(self.endpoints)}): "
                                    f"{e.detail or e.message}") from None
            self._members[index] = client
        return client

    def for_key(self, key):
        """The lct.Client of the lctd that holds key."""
        return self.member(self.place(key), key)

    def _each(self):
        return [self.member(i) for i in range(len(self.endpoints))]

    def close(self):
        for i, client in enumerate(self._members):
            if client is not None:
                client.close()
                self._members[i] = None
        self._placement.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def put(self, key, value, dtype=None, shape=None):
        return self.for_key(key).put(key, value, dtype=dtype, shape=shape)

    def get(self, key, out=None):
        return self.for_key(key).get(key, out=out)

    def delete(self, key):
        self.for_key(key).delete(key)

    def stat(self, key):
        return self.for_key(key).stat(key)

    def _by_member(self, items):
        """items' positions grouped by the endpoint of their key, in order."""
        groups = {}
        for pos, (key, _) in enumerate(items):
            groups.setdefault(self.place(key), []).append(pos)
        return groups

    def put_many(self, items, stream=None):
        """Client.put_many, each endpoint's items in one call; the infos in items' order."""
        items = list(items)
        infos = [None] * len(items)
        for index, positions in self._by_member(items).items():
            done = self.member(index, items[positions[0]][0]).put_many([items[p] for p in positions], stream)
            for p, info in zip(positions, done):
                infos[p] = info
        return infos

    def get_many(self, items, stream=None):
        """Client.get_many, each endpoint's items in one call; the outs in items' order."""
        items = list(items)
        for index, positions in self._by_member(items).items():
            self.member(index, items[positions[0]][0]).get_many([items[p] for p in positions], stream)
        return [out for _, out in items]

    def list(self, prefix=None, page_size=None):
        """The TensorInfo of every key starting with prefix on every endpoint, in bytewise key order."""
        return heapq.merge(*(c.list(prefix, page_size) for c in self._each()),
                           key=lambda info: _values.key_bytes(info.key))

    def stats_by_endpoint(self):
        """{endpoint: Client.stats()} for every endpoint."""
        return {ep: c.stats() for ep, c in zip(self.endpoints, self._each())}

    def stats(self):
        """Every endpoint's counters added up."""
        total = {}
        for counters in self.stats_by_endpoint().values():
            for name, value in counters.items():
                total[name] = total.get(name, 0) + value
        return total

    def save(self):
        """Client.save on every endpoint; the tensors written, in all."""
        return sum(c.save() for c in self._each())

    def ping(self):
        """{endpoint: ServerInfo} for every endpoint."""
        return {ep: c.ping() for ep, c in zip(self.endpoints, self._each())}
