"""The references the methods paragraphs cite (one place; docs/ARCHITECTURE.md, "Where the methods
live")."""

COUPLED = (
    'Benz et al., "Evaluation of Large Language Models via Coupled Token '
    'Generation" (Gumbel-max coupling: Section 3; benchmark comparison: Section 4, Fig. 2; win-rates: '
    "Section 5, Table 1)"
)
PPR = (
    'Chatzi et al., "Prediction-Powered Ranking of Large Language '
    'Models", NeurIPS 2024 (Algorithms 1-4, Section 5)'
)
MULTIGEN = (
    'Zhang et al., "Beyond the Singular: The Essential Role of Multiple Generations in Effective '
    'Benchmark Evaluation and Analysis" (Sections 3-4: the estimator, its variance decomposition, '
    "the data map)"
)
METHODS_CLUSTERED = "docs/METHODS.md section 7 (questions / prompts as clusters; 7.1 paired comparison)"
METHODS_RANKSETS = "docs/METHODS.md section 7.3 (simultaneous max-t rank-sets, step-down)"
METHODS_WINRATES = "docs/METHODS.md section 7.2 (prompt-cluster bootstrap, Westfall-Young max-T)"
ROMANO_WOLF = (
    'Romano and Wolf, "Stepwise multiple testing as formalized data snooping", Econometrica 2005'
)
DAVIDSON = 'Davidson, "On extending the Bradley-Terry model to accommodate ties", JASA 1970'
CAMERON = (
    'Cameron, Gelbach and Miller, "Bootstrap-based improvements for inference with clustered errors", '
    "Review of Economics and Statistics 2008"
)
WESTFALL_YOUNG = 'Westfall and Young, "Resampling-Based Multiple Testing", Wiley 1993'
REPRODUCTION = 'docs/REPRODUCTION.md, "Statistical choices beyond METHODS.md"'
METHODS_SEQUENTIAL = (
    "docs/METHODS.md section 8 (anytime-valid sequential evaluation, stop rules, α/P per pair)"
)
WAUDBY_SMITH = (
    'Waudby-Smith and Ramdas, "Confidence sequences for sampling without replacement", NeurIPS 2020; '
    '"Estimating means of bounded random variables by betting", JRSS-B 2023'
)
METHODS_AUDIT = "docs/METHODS.md section 9.2 (judge audit: agreement, kappa, bias, position consistency)"
COHEN = (
    'Cohen, "A coefficient of agreement for nominal scales", '
    "Educational and Psychological Measurement 1960"
)

# The product's win-rate, as engine/stats/winrates.py computes it (docs/METHODS.md section 7.2): stated
# wherever a report shows a win-rate, so the text and the numbers say the same.
WINRATE_DEFINITION = (
    "win-rate of A over B = #{A preferred} / #{A vs B comparisons}: a tie counts as a non-win for "
    "both (0, never half); tie rates are reported separately"
)
