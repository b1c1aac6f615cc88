"""The judge's default prompts (docs/METHODS.md section 3): the paper's system prompt, the user
message layout, and the Arena-Hard-style prompt of ``--judge-format arena-hard``. Re-exported by
:mod:`engine.tasks.judge`."""

from __future__ import annotations

# Coupled-generation paper (Benz et al.), Appendix C, Table 2: the judge's system prompt, verbatim.
PAPER_JUDGE_PROMPT = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two"
    " AI assistants to the user prompt displayed below. Your job is to evaluate which assistant"
    "’s answer is better. When evaluating the assistants’ answers, compare both assistants’ ans"
    "wers. You must identify and correct any mistakes or inaccurate information. Then consider "
    "if the assistant’s answers are helpful, relevant, and concise. Helpful means the answer co"
    "rrectly responds to the prompt or follows the instructions. Note when user prompt has any "
    "ambiguity or more than one interpretation, it is more helpful and appropriate to ask for c"
    "larifications or more information from the user than providing an answer based on assumpti"
    "ons. Relevant means all parts of the response closely connect or are appropriate to what i"
    "s being asked. Concise means the response is clear and not verbose or excessive. Then cons"
    "ider the creativity and novelty of the assistant’s answers when needed. Finally, identify "
    "any missing important information in the assistants’ answers that would be beneficial to i"
    "nclude when responding to the user prompt. do not provide any justification or explanation"
    " for your response. You must output only one of the following choices as your final verdic"
    "t: ‘A’ if the response of assistant A is better ‘B’ if the response of assistant B is bett"
    "er ‘Tie’ if the responses are tied"
)

# The user message carrying the prompt and the two answers. The paper prints only the system
# prompt ("adapted from [16]", Chiang et al., Chatbot Arena); its wording follows the LMSYS
# Arena-Hard judge prompt, so the user message uses Arena-Hard's pairwise layout (our choice).
JUDGE_USER_TEMPLATE = (
    "<|User Prompt|>\n{question}\n\n"
    "<|The Start of Assistant A's Answer|>\n{answer_a}\n<|The End of Assistant A's Answer|>\n\n"
    "<|The Start of Assistant B's Answer|>\n{answer_b}\n<|The End of Assistant B's Answer|>"
)
# For --judge-format arena-hard: the five Arena-Hard-Auto labels (our wording of its instruction;
# the judge reasons first, then ends with one label). The label -> verdict map: judge_parse.
ARENA_HARD_PROMPT = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI "
    "assistants to the user prompt displayed below. Begin by generating your own answer to the prompt, "
    "then compare both assistants' answers with yours: identify any mistakes or inaccurate information, "
    "and consider whether the answers are helpful, relevant and concise, and whether important "
    "information is missing. After your explanation, output your final verdict as exactly one label: "
    "[[A>>B]] if assistant A is significantly better, [[A>B]] if assistant A is slightly better, [[A=B]] "
    "for a tie, [[B>A]] if assistant B is slightly better, [[B>>A]] if assistant B is significantly "
    'better. Example: "My final verdict is [[A>B]]".'
)
