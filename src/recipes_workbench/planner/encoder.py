"""What decides an encoder's activation memory, read off its config and its model built on PyTorch's
meta device (shapes, no memory): the `Encoder`'s fields. What a family's forward keeps beyond them,
which neither the config nor the modules say, is its `FamilyForward` (forwards.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from recipes_lib.config.family_registry import FAMILIES, family_for
from recipes_lib.config.recipe_spec import LoraShape
from recipes_lib.errors import ModelError
from recipes_workbench.planner.forwards import DISENTANGLED, FORWARDS, GATED_ROTARY, FamilyForward
from recipes_workbench.planner.parameters import modules_the_checkpoint_lacks


@dataclass(frozen=True)
class Adapter:
    """A LoRA-adapted linear layer of one encoder layer."""

    name: str  # its path inside the layer, e.g. attention.self.query
    inputs: int
    role: str  # "qkv" (reads the attention's input, as Q, K and V do) or "other"
    projections: frozenset[str] = frozenset()  # which of query, key, value it computes


@dataclass(frozen=True)
class RelativePositions:
    """DeBERTa's disentangled attention: content-to-position (c2p) and position-to-content (p2c)
    scores against a table of relative position embeddings."""

    c2p: bool
    p2c: bool
    max_relative_positions: int  # the table holds 2 x this many rows (v1), or of the buckets (v2)
    position_buckets: int  # v2/v3: log buckets (256 for v3); 0: one row per distance
    table_rows: int  # rows of rel_embeddings
    table_norm: bool  # v2/v3 normalizes the table once per forward (norm_rel_ebd="layer_norm")
    separate_projections: bool  # v1 (pos_proj, pos_q_proj) or v2 without share_att_key

    def span(self, seq_length: int) -> int:
        """Half the positions a score row looks at: c2p and p2c scores are S x 2 span wide."""
        if self.position_buckets > 0:
            return self.position_buckets
        return min(seq_length, self.max_relative_positions)


@dataclass(frozen=True)
class Encoder:
    """What decides an encoder's activation memory: sizes from its config, structure from its modules."""

    model_type: str
    hidden: int
    layers: int
    heads: int
    intermediate: int
    hidden_dropout: float
    attention_dropout: float
    classifier_dropout: float
    embedding_dropout: float
    embedding: int  # token embedding width (ALBERT and ELECTRA project it up to the hidden size)
    layer_parameters: int  # one layer's parameters
    layer_linear_weights: int  # one layer's linear weights
    # The defaults below are BERT's.
    family: FamilyForward = FamilyForward()
    sdpa: bool = True  # the model class runs PyTorch's SDPA (DeBERTa and MPNet: eager attention only)
    flash_attention: bool = False  # the model class runs FlashAttention 2 (_supports_flash_attn)
    checkpointing: bool = True  # the class supports activation checkpointing (ALBERT and MPNet do not)
    activation_keeps: int = 1  # T x F tensors the FFN activation keeps (GELU: its input; tanh-GELU: 4)
    activation_keeps_output: bool = False  # ReLU keeps its output, which the next linear reads anyway
    gated_ffn: bool = False  # the first FFN linear is 2F wide: activation(one half) x the other half
    adapters: tuple[Adapter, ...] = ()  # the LoRA-adapted linears of one layer
    head_trains: bool = True  # the head's first linear trains (with adapters: when it is new, or asked)
    relative: RelativePositions | None = None  # DeBERTa
    sliding_layers: int = 0  # ModernBERT: layers with local (sliding-window) attention
    sliding_window: int = 0  # ModernBERT: tokens each side a sliding-window layer attends to
    # DeBERTa-v2 xlarge/xxlarge (conv_kernel_size > 0): the weights of the ConvLayer that mixes the
    # embeddings into the first layer's output; 0: none.
    conv_weights: int = 0

    @property
    def adapted_projections(self) -> set[str]:
        """Which of query, key, value carry adapters (a fused projection: all three)."""
        return set().union(*(adapter.projections for adapter in self.adapters)) if self.adapters else set()

    @classmethod
    def from_config(cls, config, adapters: LoraShape | None = None) -> Encoder:
        """The encoder of `config`; with `adapters`, the linears of a layer they wrap (cached per config)."""
        key = (config.to_json_string(use_diff=False), type(config), adapters)
        if key not in _ENCODERS:
            if len(_ENCODERS) > 64:
                _ENCODERS.clear()
            _ENCODERS[key] = _describe_encoder(config, adapters)
        return _ENCODERS[key]


_ENCODERS: dict[tuple, Encoder] = {}


def _family_of(config) -> FamilyForward:
    family = family_for(config.model_type)
    if family is not None:  # with the index tensors the config's set flags add (ERNIE 3.0's use_task_id)
        forward = FORWARDS[family.model_type]
        flagged = sum(bool(getattr(config, flag, False)) for flag in forward.index_flags)
        return replace(forward, embedding_indices=forward.embedding_indices + flagged)
    missing = [
        name
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
        if getattr(config, name, None) is None
    ]
    if missing:
        known = ", ".join(model_type for family in FAMILIES for model_type in family.model_types)
        raise ModelError(
            f"The planner knows these encoder families: {known}, and BERT-like configs; this "
            f"{config.model_type} config has no {', '.join(missing)}."
        )
    return FamilyForward()  # an unknown family with BERT's config names: planned as BERT


def _layer_path(model) -> str:
    """The module path of the first of the repeated encoder layers (families.py finds the stack)."""
    from recipes_lib.modeling.families import profile_for

    paths = profile_for(model.config).layer_modules
    if not paths:
        raise ModelError(
            f"The planner found no stack of encoder layers in this {model.config.model_type} model."
        )
    return f"{paths[0]}.0"


def _activation_module(layer):
    """The layer's FFN activation: its first module of a class transformers' ACT2FN names."""
    from transformers.activations import ACT2CLS

    classes = tuple({entry[0] if isinstance(entry, tuple) else entry for entry in ACT2CLS.values()})
    return next((module for module in layer.modules() if isinstance(module, classes)), None)


def what_activation_keeps(activation) -> tuple[int, bool]:
    """(how many tensors of its input's size the activation keeps for backward, whether its output is one).

    Found by running it once on a small tensor: GELU keeps its input; the tanh approximation
    written out in Python (ALBERT's gelu_new) keeps its input, tanh, 1 + tanh and x / 2; ReLU its output.
    """
    import torch

    if activation is None:
        return 1, False
    kept: dict[int, torch.Tensor] = {}

    def pack(tensor):
        if tensor.numel() == 32:
            kept[tensor.untyped_storage().data_ptr()] = tensor
        return tensor

    with torch.device("cpu"):
        x = torch.linspace(-2, 2, 32, requires_grad=True) * 1.0  # a non-leaf, as a linear's output is
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            y = activation(x)
    return len(kept), y.untyped_storage().data_ptr() in kept


def _describe_encoder(config, adapters: LoraShape | None) -> Encoder:
    """Encoder.from_config, uncached: build the meta model once and read everything off it."""
    from torch import nn

    from recipes_lib.modeling.families import meta_model

    family = _family_of(config)
    model = meta_model(config)
    layer_path = _layer_path(model)
    layer = model.get_submodule(layer_path)
    linears = {name: module for name, module in layer.named_modules() if isinstance(module, nn.Linear)}
    embeddings = [
        m for m in model.modules() if isinstance(m, nn.Embedding) and m.num_embeddings == config.vocab_size
    ]
    hidden = config.hidden_size
    intermediate = getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", None)
    gated = False
    if family.layer == GATED_ROTARY:  # Wi projects to 2 x intermediate: GELU(one half) x the other half
        gated = linears["mlp.Wi"].out_features == 2 * linears["mlp.Wo"].in_features
        intermediate = linears["mlp.Wo"].in_features
    elif "mlp.gate_proj" in linears:  # GTE, NomicBERT, EuroBERT: activation(gate_proj) x up_proj
        gated = True
        intermediate = linears["mlp.gate_proj"].out_features
    keeps, keeps_output = what_activation_keeps(_activation_module(layer))
    relative = _relative_positions(config, model, layer_path) if family.layer == DISENTANGLED else None
    return Encoder(
        model_type=config.model_type,
        hidden=hidden,
        layers=config.num_hidden_layers,
        heads=config.num_attention_heads,
        intermediate=intermediate,
        **_dropouts(config),
        embedding=embeddings[0].embedding_dim if embeddings else hidden,
        family=family,
        sdpa=bool(getattr(type(model), "_supports_sdpa", False)),
        flash_attention=bool(getattr(type(model), "_supports_flash_attn", False)),
        checkpointing=bool(getattr(type(model), "supports_gradient_checkpointing", False)),
        activation_keeps=keeps,
        activation_keeps_output=keeps_output,
        gated_ffn=gated,
        layer_parameters=sum(p.numel() for p in layer.parameters()),
        layer_linear_weights=sum(m.weight.numel() for m in linears.values()),
        **(_adapters_and_head(config, model, layer_path, family, adapters) if adapters else {}),
        relative=relative,
        sliding_layers=sum(
            kind == "sliding_attention" for kind in getattr(config, "layer_types", None) or ()
        ),
        sliding_window=getattr(config, "sliding_window", None) or 0,
        conv_weights=sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Conv1d)),
    )


# Config names of the dropout probabilities, by family (the first that is set wins).
_HIDDEN_DROPOUTS = ("hidden_dropout_prob", "dropout", "mlp_dropout")
_ATTENTION_DROPOUTS = ("attention_probs_dropout_prob", "attention_dropout")
_CLASSIFIER_DROPOUTS = ("classifier_dropout", "classifier_dropout_prob", "seq_classif_dropout", "cls_dropout")


def _first(config, names: tuple[str, ...], default):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def _dropouts(config) -> dict[str, float]:
    """The Encoder's dropout probabilities, under whichever names the family's config uses;
    the classifier's and the embeddings' default to the hidden states'."""
    hidden_dropout = float(_first(config, _HIDDEN_DROPOUTS, 0.1) or 0.0)
    classifier_dropout = _first(config, _CLASSIFIER_DROPOUTS, None)
    return dict(
        hidden_dropout=hidden_dropout,
        attention_dropout=float(_first(config, _ATTENTION_DROPOUTS, 0.1) or 0.0),
        classifier_dropout=hidden_dropout if classifier_dropout is None else float(classifier_dropout),
        embedding_dropout=float(_first(config, ("embedding_dropout",), hidden_dropout) or 0.0),
    )


def _relative_positions(config, model, layer_path: str) -> RelativePositions | None:
    """DeBERTa's relative position attention, as the config sets it and the model's table holds it."""
    if not getattr(config, "relative_attention", False):
        return None
    pos_att_type = getattr(config, "pos_att_type", None) or []
    max_relative = getattr(config, "max_relative_positions", -1)
    max_relative = config.max_position_embeddings if max_relative < 1 else max_relative
    table = model.get_submodule(layer_path.rsplit(".layer.", 1)[0]).rel_embeddings
    # v2/v3's attention sets share_att_key from the config (v1's has none: its own projections).
    shared = any(
        getattr(module, "share_att_key", False) for module in model.get_submodule(layer_path).modules()
    )
    return RelativePositions(
        c2p="c2p" in pos_att_type,
        p2c="p2c" in pos_att_type,
        max_relative_positions=max_relative,
        position_buckets=max(getattr(config, "position_buckets", -1), 0),
        table_rows=table.num_embeddings,
        table_norm="layer_norm" in getattr(config, "norm_rel_ebd", "none"),
        separate_projections=not shared,
    )


def _adapters_and_head(config, model, layer_path: str, family: FamilyForward, shape: LoraShape) -> dict:
    """The linears of one encoder layer that these adapters wrap, as peft matches them, and whether the
    head's first linear (pooler, pre_classifier: hidden x hidden) trains, on the meta model."""
    from torch import nn

    from recipes_lib.modeling.adapters import add_lora

    stack = layer_path.rsplit(".", 1)[0] + "."
    head = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
        and stack not in f"{name}."
        and module.in_features == module.out_features == config.hidden_size
    ]
    model.newly_initialized_modules = modules_the_checkpoint_lacks(config, model)
    wrapped = add_lora(model, shape)
    trained = {name for name, parameter in wrapped.named_parameters() if parameter.requires_grad}
    # Its own weight trains (in full), or an adapter reads its input as it is (no LoRA dropout).
    head_trains = any(
        f"{path}." in f".{name}" and ("lora_" not in name or shape.dropout == 0)
        for name in trained
        for path in head
    )
    return {"adapters": _layer_adapters(wrapped, layer_path, family), "head_trains": head_trains}


def _layer_adapters(wrapped, layer_path: str, family: FamilyForward) -> tuple[Adapter, ...]:
    """The adapted linears inside the layer at `layer_path` of the peft-wrapped model."""
    from torch import nn

    marker = f"{layer_path}."
    found = []
    for name, module in wrapped.named_modules():
        if (
            marker not in name
            or not hasattr(module, "lora_A")
            or not isinstance(module.base_layer, nn.Linear)
        ):
            continue
        inside = name.split(marker, 1)[1]
        last = inside.rsplit(".", 1)[-1]
        projections = frozenset(
            role
            for role, projection in zip(("query", "key", "value"), family.qkv, strict=True)
            if projection == last
        )
        role = "qkv" if projections else "other"
        found.append(Adapter(inside, module.base_layer.in_features, role, projections))
    return tuple(found)
