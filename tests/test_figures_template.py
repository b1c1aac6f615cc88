"""engine.figures.common.layout assigns the plotly_white template without validating it again
(``_set_template``): the figures must be the ones plotly's validated assignment gives, and plotly's
registered template must stay untouched."""

from __future__ import annotations

import copy

import plotly.graph_objects as go
import plotly.io as pio

from engine.figures.common import empty_figure, interval_figure, layout


def _figures() -> list[go.Figure]:
    return [
        empty_figure("nothing to draw"),
        interval_figure(
            ["a", "b"], [0.4, 0.6], [0.3, 0.5], [0.5, 0.7], groups=["coupled", "independent"]
        ),
        layout(go.Figure(go.Scatter(x=[1, 2], y=[3, 4])), "a title", height=300, xaxis_title="x"),
    ]


def test_the_figures_equal_those_of_plotly_s_validated_template_assignment():
    for fig in _figures():
        validated = go.Figure(fig)  # a copy, then plotly's own (validating) assignment
        validated.update_layout(template="plotly_white")
        assert fig.to_dict() == validated.to_dict()
        assert fig.layout.template.to_plotly_json() == pio.templates["plotly_white"].to_plotly_json()


def test_the_registered_template_and_the_default_stay_as_they_were():
    default, white = pio.templates.default, copy.deepcopy(pio.templates["plotly_white"].to_plotly_json())
    a, b = _figures()[1], _figures()[1]
    a.layout.template.layout.font.size = 31  # a figure's template is its own copy
    assert b.layout.template.layout.font.size != 31
    assert pio.templates["plotly_white"].to_plotly_json() == white
    assert pio.templates.default == default
