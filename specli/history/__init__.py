"""Earlier outputs: the store on disk (`store`) and the suffix index that drafts from
them (`index`)."""

from specli.history.index import Continuation, SuffixIndex
from specli.history.store import DamagedStore, HistoryStore, history_dir, read_store, write_store

__all__ = ["Continuation", "DamagedStore", "HistoryStore", "SuffixIndex", "history_dir", "read_store", "write_store"]
