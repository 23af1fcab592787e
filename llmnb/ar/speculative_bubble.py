"""SuperSpec's bubble rule: how long a drafter's next draft is, from its last one's bubble.

C. Shen, R. Guo, Y. Cheng, Y. Lin, Z. Zhao, Y. Hu, S. Chen, X. Liu, K. Li, "SuperSpec: Enhanced
Verification and Sampling for End-to-End LLM Speculative Decoding", IEEE HPCC 2025
(DOI 10.1109/HPCC67675.2025.00064), Algorithm 1: the draft length K adapts to the *bubbles*,
the drafted rows the target computed and threw away. The paper itself could not be read here;
its algorithm is known from the llm-cpu README's description (``reference/peers.md`` §8.1),
and this is llmnb's reading of it. A drafter asked for K tokens had n of them verified and a
accepted; its bubble is b = n - a, and

    b == 0 and n >= K:  K <- min(k_max, K + ceil(K / 2))      all of it right: grow by half
    b > 0:              K <- max(1, K - ceil(b / 2))           give back half the bubble

so K rises geometrically while drafts are right and falls by half the waste when they are
not. llmnb applies it when no costs are measured (``BubbleController(gate=False)``); with
costs, ``speculative_control`` chooses K from the measured acceptance and prices instead.
"""
from __future__ import annotations


def bubble_rule(k: int, verified: int, accepted: int, k_max: int) -> int:
    """The next K of a drafter asked for `k` tokens, `verified` of them, `accepted` right."""
    bubble = verified - accepted
    if bubble == 0 and verified >= k:
        return min(k_max, k + (k + 1) // 2)
    if bubble > 0:
        return max(1, k - (bubble + 1) // 2)
    return k
