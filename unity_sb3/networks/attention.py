"""Variable-length observations: ML-Agents' entity embedding and residual self-attention.

A ``BufferSensor`` sends a rank-2 observation ``(max_entities, entity_size)``: one row per entity
(a tile, an opponent, a ball), zero-padded up to ``max_entities``. ML-Agents' ``ObservationEncoder``
does not flatten it; it (1) encodes the fixed-size observations, (2) embeds every entity together
with that encoding of "self" (``EntityEmbedding``), (3) lets the entities attend to one another
with a residual multi-head self-attention block whose all-zero rows are masked out, and (4)
averages the result over the real entities (``ResidualSelfAttention``). The average does not
depend on the entities' order or count, which is what a policy over a varying set of things needs.

:class:`EntityAttention` is that pipeline for any number of rank-2 observations; the project's
features extractor :class:`unity_sb3.networks.extractors.UnityMultiInputExtractor` uses it for
every 2-D ``Box`` of a behavior. The layers follow ML-Agents' ``torch_entities/attention.py`` and
``ModelUtils.create_residual_self_attention``: embedding size 128, 4 heads, Swish after each
embedding, layer norms without learned parameters, weights drawn from a normal distribution with
gain ``sqrt(0.125 / embedding_size)`` (T-Fixup), and an entity counted as absent when the sum of
its squared features is below 0.01.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch as th
from torch import nn
from torch.nn import functional as F

#: ML-Agents' ``ObservationEncoder.ATTENTION_EMBEDDING_SIZE``.
ATTENTION_EMBEDDING_SIZE = 128
#: ML-Agents' ``ResidualSelfAttention`` default.
NUM_HEADS = 4
#: A row whose squared features sum below this is padding (ML-Agents' ``get_zero_entities_mask``).
ZERO_ENTITY_THRESHOLD = 0.01
_NEG_INF = -1e6  # ML-Agents' MultiHeadAttention.NEG_INF: finite, so an all-masked row stays finite
_EPSILON = 1e-7
#: Outside export, attention runs its dense layers on the real rows only when at least this many rows
#: of the batch, and a quarter of them, are padding: gathering the real rows costs more than it saves
#: on rollout-sized batches and when nearly every row is real (``benchmarks/attention_speed.py``).
PACK_MIN_PADDING_ROWS = 1536


def _exporting() -> bool:
    """Whether the module is being traced (ONNX export): then the layers run ML-Agents' op layout as written.

    Outside tracing they take cheaper routes to the same values (fused layer norm and Swish, the "self"
    part of the entity embedding computed once per observation instead of once per entity, padding
    columns cut away, the attention's dense layers run on the real rows only); an exported graph
    must keep fixed shapes and the ops Unity's inference runs.
    """
    return th.jit.is_tracing() or th.onnx.is_in_onnx_export()


def zero_entities_mask(entities: th.Tensor) -> th.Tensor:
    """1.0 where an entity row is padding (all zeros), 0.0 where it is a real entity.

    :param entities: ``(batch, max_entities, entity_size)``.
    :return: ``(batch, max_entities)`` float, no gradient.
    """
    with th.no_grad():
        return (th.sum(entities.float() ** 2, dim=2) < ZERO_ENTITY_THRESHOLD).float()


def _tfixup_linear(in_features: int, out_features: int, embedding_size: int) -> nn.Linear:
    """A dense layer initialised as ML-Agents' attention layers: normal weights, gain sqrt(0.125 / emb), zero bias."""
    layer = nn.Linear(in_features, out_features)
    nn.init.normal_(layer.weight, std=(0.125 / embedding_size) ** 0.5)
    nn.init.zeros_(layer.bias)
    return layer


class Swish(nn.Module):
    """Swish, ``x * sigmoid(x)`` (ML-Agents' activation): fused ``silu`` outside ONNX export, written
    out while exporting."""

    def forward(self, x: th.Tensor) -> th.Tensor:
        if _exporting():
            return x * th.sigmoid(x)
        return F.silu(x)


def layer_norm(x: th.Tensor) -> th.Tensor:
    """Normalise the last axis to zero mean and unit variance, no learned scale (ML-Agents' ``LayerNorm``)."""
    if not _exporting():  # the same formula, fused (its backward pass is several times cheaper)
        return F.layer_norm(x, x.shape[-1:], eps=1e-5)
    mean = th.mean(x, dim=-1, keepdim=True)
    var = th.mean((x - mean) ** 2, dim=-1, keepdim=True)
    return (x - mean) / th.sqrt(var + 1e-5)


def _last_present_column(mask: th.Tensor) -> int:
    """How many leading rows hold every real entity of the batch (at least 1): the rest is padding everywhere."""
    present = th.nonzero(mask.min(dim=0).values < 0.5)
    return int(present[-1, 0]) + 1 if len(present) else 1


class EntityEmbedding(nn.Module):
    """Embed each entity, concatenated with the agent's own encoding when there is one.

    :param entity_size: features per entity (the observation's second axis).
    :param max_entities: rows of the observation (its first axis).
    :param embedding_size: output features per entity.
    :param self_size: size of the "self" encoding concatenated to every entity; 0 for none.
    """

    def __init__(self, entity_size: int, max_entities: int, embedding_size: int, self_size: int = 0) -> None:
        super().__init__()
        self.entity_size, self.max_entities = entity_size, max_entities
        self.self_size, self.embedding_size = self_size, embedding_size
        self.encoder = nn.Sequential(
            _tfixup_linear(self_size + entity_size, embedding_size, embedding_size), Swish()
        )

    def forward(self, x_self: th.Tensor | None, entities: th.Tensor) -> th.Tensor:
        """:param x_self: ``(batch, self_size)`` or ``None`` when ``self_size`` is 0.
        :param entities: ``(batch, max_entities, entity_size)``.
        :return: ``(batch, max_entities, embedding_size)``.
        """
        if not self.self_size:
            return self.encoder(entities)
        assert x_self is not None
        if not _exporting():
            # linear([self, entity]) = linear_entity(entity) + linear_self(self): the self part once per row
            dense, swish = self.encoder[0], self.encoder[1]
            weight = dense.weight
            per_entity = F.linear(entities, weight[:, self.self_size :], dense.bias)
            return swish(per_entity + F.linear(x_self, weight[:, : self.self_size]).unsqueeze(1))
        expanded = x_self.reshape(-1, 1, self.self_size).expand(-1, self.max_entities, -1)
        return self.encoder(th.cat([expanded, entities], dim=2))


class ResidualSelfAttention(nn.Module):
    """Multi-head self-attention over embedded entities, a residual connection, then a masked mean.

    Written with reshapes, permutes and matmuls (no ``nn.MultiheadAttention``) so that it exports
    to ONNX opset 9 for Unity's inference engine, as ML-Agents' own.

    :param embedding_size: features per entity (divisible by ``num_heads``).
    :param max_entities: total rows attended over.
    :param num_heads: attention heads.
    """

    def __init__(self, embedding_size: int, max_entities: int, num_heads: int = NUM_HEADS) -> None:
        super().__init__()
        if embedding_size % num_heads:
            raise ValueError(f"embedding_size {embedding_size} must be divisible by num_heads {num_heads}.")
        self.embedding_size, self.max_entities, self.num_heads = embedding_size, max_entities, num_heads
        self.head_size = embedding_size // num_heads
        self.fc_q, self.fc_k, self.fc_v, self.fc_out = (
            _tfixup_linear(embedding_size, embedding_size, embedding_size) for _ in range(4)
        )

    def _attend(self, query: th.Tensor, key: th.Tensor, value: th.Tensor, mask: th.Tensor) -> th.Tensor:
        exporting = _exporting()
        n = self.max_entities if exporting else query.shape[1]  # fewer when padding columns were cut
        h, d = self.num_heads, self.head_size
        query = query.reshape(-1, n, h, d).permute(0, 2, 1, 3)  # (b, h, n, d)
        key = key.reshape(-1, n, h, d).permute(0, 2, 3, 1)  # (b, h, d, n)
        value = value.reshape(-1, n, h, d).permute(0, 2, 1, 3)  # (b, h, n, d)
        scores = th.matmul(query, key)  # (b, h, n, n)
        key_mask = mask.reshape(-1, 1, 1, n)
        if exporting:
            scores = (1 - key_mask) * scores / (self.embedding_size**0.5) + key_mask * _NEG_INF
        else:  # the same values: masked scores are exactly _NEG_INF, the others scaled
            scores = (scores / (self.embedding_size**0.5)).masked_fill(key_mask > 0.5, _NEG_INF)
        weights = th.softmax(scores, dim=3)
        out = th.matmul(weights, value).permute(0, 2, 1, 3)  # (b, n, h, d)
        return out.reshape(-1, n, self.embedding_size)

    def forward(self, embeddings: th.Tensor, mask: th.Tensor) -> th.Tensor:
        """:param embeddings: ``(batch, max_entities, embedding_size)``.
        :param mask: ``(batch, max_entities)``, 1.0 for padding rows (:func:`zero_entities_mask`).
        :return: ``(batch, embedding_size)``: the mean over real entities (zeros when there is none).
        """
        if mask.numel() >= PACK_MIN_PADDING_ROWS and not _exporting():  # rollout batches: no sync
            padding = int(mask.sum())
            if padding >= PACK_MIN_PADDING_ROWS and 4 * padding >= mask.numel():
                present = th.nonzero(mask.reshape(-1) < 0.5).squeeze(1)
                return self._forward_packed(embeddings, mask, present)
        x = layer_norm(embeddings)
        attended = self._attend(self.fc_q(x), self.fc_k(x), self.fc_v(x), mask)
        out = layer_norm(self.fc_out(attended) + x)
        rows = self.max_entities if _exporting() else mask.shape[1]
        present = (1 - mask).reshape(-1, rows, 1)
        return th.sum(out * present, dim=1) / (th.sum(present, dim=1) + _EPSILON)

    def _forward_packed(self, embeddings: th.Tensor, mask: th.Tensor, present: th.Tensor) -> th.Tensor:
        """:meth:`forward` with the dense layers and norms run on the real entities only.

        A padding row's key is masked (its softmax weight is exactly 0) and its output is left out of
        the mean, so its query, key and value never reach the result: zeros in their place change no
        value and no gradient. Only the attention scores keep the padded ``(rows, rows)`` layout.

        :param present: flat indices of the real rows in ``embeddings.reshape(-1, embedding_size)``.
        """
        batch, rows, size = embeddings.shape
        x = layer_norm(embeddings.reshape(-1, size)[present])  # (real rows, size)

        def padded(t: th.Tensor) -> th.Tensor:
            return t.new_zeros(batch * rows, size).index_copy(0, present, t).reshape(batch, rows, size)

        attended = self._attend(padded(self.fc_q(x)), padded(self.fc_k(x)), padded(self.fc_v(x)), mask)
        out = layer_norm(self.fc_out(attended.reshape(-1, size)[present]) + x)
        total = out.new_zeros(batch, size).index_add(0, th.div(present, rows, rounding_mode="floor"), out)
        return total / (th.sum(1 - mask, dim=1, keepdim=True) + _EPSILON)


class EntityAttention(nn.Module):
    """The rank-2 part of ML-Agents' ``ObservationEncoder``: "self" encoding, entity embeddings, attention.

    :param self_size: size of the concatenated fixed-size observation features (0 when the
        behavior has only rank-2 observations).
    :param entity_shapes: ``(max_entities, entity_size)`` of each rank-2 observation.
    :param embedding_size: size of the embeddings and of the output (ML-Agents: 128).
    :param num_heads: attention heads (ML-Agents: 4).
    :raises ValueError: for no or malformed entity shapes.
    """

    def __init__(
        self,
        self_size: int,
        entity_shapes: Sequence[tuple[int, int]],
        embedding_size: int = ATTENTION_EMBEDDING_SIZE,
        num_heads: int = NUM_HEADS,
    ) -> None:
        super().__init__()
        shapes = [tuple(int(d) for d in s) for s in entity_shapes]
        if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes):
            raise ValueError(
                f"entity_shapes must list (max_entities, entity_size) pairs of positive sizes, got {entity_shapes!r}."
            )
        self.entity_shapes = shapes
        self.self_size = int(self_size)
        self.output_size = embedding_size
        # ML-Agents: one Swish layer maps the fixed observations to the embedding size first
        self.self_encoder: nn.Module | None = None
        embedded_self = 0
        if self.self_size:
            self.self_encoder = nn.Sequential(
                _tfixup_linear(self.self_size, embedding_size, embedding_size), Swish()
            )
            embedded_self = embedding_size
        self.embeddings = nn.ModuleList(
            EntityEmbedding(size, rows, embedding_size, embedded_self) for rows, size in shapes
        )
        self.attention = ResidualSelfAttention(embedding_size, sum(rows for rows, _ in shapes), num_heads)

    def forward(self, x_self: th.Tensor | None, entities: Sequence[th.Tensor]) -> th.Tensor:
        """:param x_self: ``(batch, self_size)`` fixed-observation features, or ``None`` if ``self_size`` is 0.
        :param entities: one ``(batch, max_entities, entity_size)`` tensor per rank-2 observation.
        :return: ``(batch, embedding_size)``.
        """
        entities = [e.float() for e in entities]
        masks = [zero_entities_mask(e) for e in entities]
        if not _exporting():
            # Rows that are padding in every observation of the batch (BufferSensor pads at the end)
            # attend to nothing and are left out of the mean: cutting them changes no value.
            keep = [_last_present_column(m) for m in masks]
            entities = [e[:, :k] for e, k in zip(entities, keep)]
            masks = [m[:, :k] for m, k in zip(masks, keep)]
        mask = th.cat(masks, dim=1)
        encoded_self = self.self_encoder(x_self) if self.self_encoder is not None else None
        embedded = th.cat([emb(encoded_self, e) for emb, e in zip(self.embeddings, entities)], dim=1)
        return self.attention(embedded, mask)
