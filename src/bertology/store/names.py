"""What a store is made of, by name: light (no torch), so that settings are checked before anything heavy loads."""

FORMAT_VERSION = 1
INDEX_NAME = "store.json"
SENTENCES_NAME = "sentences.json"
WORD_POOLS = ("word-mean", "word-first", "word-last")
SENTENCE_POOLS = ("cls", "mean")
POOLS = WORD_POOLS + SENTENCE_POOLS + ("tokens",)
#: Storage dtypes of hidden states (``store.DTYPES`` maps them to torch dtypes).
DTYPE_NAMES = ("float16", "bfloat16", "float32")
#: What a shard's tensors weigh, roughly: a few tens of MB bound the memory of every store writer.
SHARD_TARGET_BYTES = 48 << 20
