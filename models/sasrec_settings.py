"""SASRec's block styles and execution defaults, shared by both models and the run flags.

Plain Python (no framework): `models.sasrec` (tf-keras), `models.keras3.sasrec` and
`train.config` read them here, so the flags of `python -m train.keras3` need no TensorFlow.

    BLOCK_STYLES: "pre_ln" (LayerNorm before attention and FFN) or "reference" (the original
        SASRec block of the paper's code);
    DEFAULT_PACK_TOKENS: run the per-token layers on the real tokens only;
    DEFAULT_ATTENTION_BLOCKS: query blocks of the blocked causal attention.
"""

__all__ = ["BLOCK_STYLES", "DEFAULT_ATTENTION_BLOCKS", "DEFAULT_PACK_TOKENS"]

BLOCK_STYLES = ("pre_ln", "reference")
DEFAULT_PACK_TOKENS = True
DEFAULT_ATTENTION_BLOCKS = 2
