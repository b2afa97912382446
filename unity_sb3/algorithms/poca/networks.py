"""Attention networks of MA-POCA's centralised critic.

The critic sees a *set* of group members whose size changes from step to step (agents die,
new ones spawn). Each member becomes an entity embedding; residual self-attention with a key
mask mixes the entities and a masked mean pools them into one vector, so the same weights
serve groups of any size. Two entity encoders share that body (as in ML-Agents'
``MultiAgentNetworkBody``):

- ``value``: every member encoded from its observation only -> V(group observations);
- ``baseline``: the agent itself from its observation, each groupmate from its observation
  *and action* -> b(own observation, groupmates' observations and actions).

:class:`RecurrentGroupCriticBody` (POCA with memory) adds ML-Agents' critic LSTM between the pooling
and the head.
"""

from __future__ import annotations

from typing import Any

import torch as th
from torch import nn
from torch.nn import functional as F

from unity_sb3.networks.memory import LSTMMemory


class ResidualSelfAttention(nn.Module):
    """Multi-head self-attention over entities with a residual connection and masked mean pooling.

    :param embed_dim: size of each entity embedding.
    :param n_heads: number of attention heads (must divide ``embed_dim``).
    """

    def __init__(self, embed_dim: int, n_heads: int = 4) -> None:
        super().__init__()
        if embed_dim % n_heads != 0:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by n_heads={n_heads}.")
        self.input_norm = nn.LayerNorm(embed_dim)
        self.attention = nn.MultiheadAttention(embed_dim, n_heads, batch_first=True)
        self.output = nn.Linear(embed_dim, embed_dim)
        self.residual_norm = nn.LayerNorm(embed_dim)

    def forward(self, entities: th.Tensor, mask: th.Tensor | None) -> th.Tensor:
        """
        :param entities: entity embeddings, shape (batch, n_entities, embed_dim).
        :param mask: True where an entity is present, shape (batch, n_entities); every row
            needs at least one present entity. None: every entity of every row is present (the
            same result as an all-True mask, without the masking work).
        :return: pooled encoding, shape (batch, embed_dim).
        """
        if entities.shape[1] == 1:
            # One entity (groups of one): softmax over a single key is 1, so attention is the
            # value and output projections alone; skips the query/key work, same result.
            embed_dim = entities.shape[-1]
            in_weight, in_bias = self.attention.in_proj_weight, self.attention.in_proj_bias
            attended = F.linear(
                self.input_norm(entities), in_weight[2 * embed_dim :], in_bias[2 * embed_dim :]
            )
            return self._pool_attended(entities, attended, mask)
        return self.mix(entities, self.project(entities), mask)

    def project(self, entities: th.Tensor) -> th.Tensor:
        """Queries, keys and values of entity embeddings (the input norm, then the packed
        in-projection), shape (..., 3 * embed_dim). Each entity on its own, so one projection of an
        entity serves every set it is in (:meth:`mix`).

        :param entities: entity embeddings, shape (..., embed_dim).
        """
        attention = self.attention
        return F.linear(self.input_norm(entities), attention.in_proj_weight, attention.in_proj_bias)

    def mix(self, entities: th.Tensor, projected: th.Tensor, mask: th.Tensor | None) -> th.Tensor:
        """What :meth:`forward` computes, given the entities' projections (:meth:`project`).

        :param entities: entity embeddings, shape (batch, n_entities, embed_dim).
        :param projected: ``project(entities)``, shape (batch, n_entities, 3 * embed_dim).
        :param mask: as in :meth:`forward`.
        :return: pooled encoding, shape (batch, embed_dim).
        """
        batch, n_entities, embed_dim = entities.shape
        heads = self.attention.num_heads
        head_dim = embed_dim // heads
        if n_entities == 1:
            attended = projected[..., 2 * embed_dim :]
        elif n_entities == 2 and mask is None:
            # Two entities (groups of three that lost one): a softmax over two keys is the sigmoid
            # of the score difference, so each query gets v1 + sigmoid(q.(k0 - k1) / sqrt(d)) (v0 - v1).
            # The same attention to float rounding in a few elementwise operations, about half the
            # cost of torch's attention kernel here, forward and backward.
            query, key, value = projected.reshape(batch, 2, 3, heads, head_dim).unbind(2)
            key_gap, value_gap = key[:, 0] - key[:, 1], value[:, 0] - value[:, 1]  # (batch, heads, head_dim)
            first = th.sigmoid((query * key_gap.unsqueeze(1)).sum(-1) * head_dim**-0.5)  # (batch, 2, heads)
            attended = th.addcmul(value[:, 1:2], first.unsqueeze(-1), value_gap.unsqueeze(1))
            attended = attended.reshape(batch, 2, embed_dim)
        else:
            # nn.MultiheadAttention's own computation (packed in-projection, scaled dot-product
            # attention, -inf at absent keys), without its layout copies: its per-projection
            # selects cost a full-size zero-fill each in the backward, more than the attention.
            qkv = projected.reshape(batch, n_entities, 3, heads, head_dim)
            query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (batch, heads, entities, head_dim)
            absent = None  # no mask and an all-zero one give the same numbers (scores + 0)
            if mask is not None:
                absent = th.zeros((batch, 1, 1, n_entities), dtype=entities.dtype, device=entities.device)
                absent.masked_fill_(~mask.view(batch, 1, 1, n_entities), float("-inf"))
            attended = F.scaled_dot_product_attention(query, key, value, attn_mask=absent)
            attended = attended.transpose(1, 2).reshape(batch, n_entities, embed_dim)
        return self._pool_attended(entities, attended, mask)

    def _pool_attended(self, entities: th.Tensor, attended: th.Tensor, mask: th.Tensor | None) -> th.Tensor:
        """Output projections, residual norm and the masked mean over entities (batch, embed_dim)."""
        # The attention's output projection and then ``output``: two linear maps in a row, applied
        # as their product (one matrix product per entity instead of two; the same map).
        weight = self.output.weight @ self.attention.out_proj.weight
        bias = th.addmv(self.output.bias, self.output.weight, self.attention.out_proj.bias)
        mixed = self.residual_norm(entities + F.linear(attended, weight, bias))
        if mask is None:  # the masked mean with weights 1 and count n_entities: the same numbers
            return mixed.sum(dim=1) / float(entities.shape[1])
        weights = mask.unsqueeze(-1).to(mixed.dtype)
        return (mixed * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


class GroupCriticBody(nn.Module):
    """Entity encoders + residual self-attention + MLP head giving one scalar per row.

    :param features_dim: size of one member's observation features (from the critic's
        features extractor).
    :param action_dim: size of one encoded action (one-hot per discrete branch, or the
        continuous vector).
    :param embed_dim: entity embedding size.
    :param n_heads: attention heads.
    :param net_arch: hidden layer sizes of the head after pooling.
    :param activation_fn: activation of embeddings and head.
    """

    def __init__(
        self,
        features_dim: int,
        action_dim: int,
        embed_dim: int = 128,
        n_heads: int = 4,
        net_arch: list[int] | None = None,
        activation_fn: type[nn.Module] = nn.ReLU,
    ) -> None:
        super().__init__()
        net_arch = [128, 128] if net_arch is None else list(net_arch)
        self.obs_encoder = nn.Sequential(nn.Linear(features_dim, embed_dim), activation_fn())
        self.obs_action_encoder = nn.Sequential(
            nn.Linear(features_dim + action_dim, embed_dim), activation_fn()
        )
        self.attention = ResidualSelfAttention(embed_dim, n_heads)
        # + the (scaled) number of members, as ML-Agents feeds it
        self.head = value_head(embed_dim + 1, net_arch, activation_fn)
        # Largest number of entities seen so far; scales the member count input. Saved with the model.
        self.register_buffer("max_entities", th.ones(()))
        #: rows of groups that lost members go through at their own width, one pass per group size
        #: (:meth:`_value_and_baseline_by_size`); False: one padded pass. Splitting saves arithmetic
        #: on large batches and costs a pass per size on small ones (POCA sets it by batch size).
        self.split_by_size = True

    def embed(self, entities: th.Tensor, mask: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """Attention-pooled encoding (batch, embed_dim) of entity sets and their member counts
        (batch, 1); updates the largest count seen."""
        count = mask.sum(dim=1, keepdim=True).to(entities.dtype)
        if count.numel() > 0:
            self._raise_max_entities(count.max())
        return self.attention(entities, mask), count

    def _raise_max_entities(self, largest: th.Tensor) -> None:
        """Raise the largest member count seen (it scales the count input) to ``largest`` (a scalar)."""
        with th.no_grad():
            self.max_entities.copy_(th.maximum(self.max_entities, largest.to(self.max_entities.dtype)))

    def read_out(self, encoding: th.Tensor, count: th.Tensor) -> th.Tensor:
        """The head's scalar (batch,) from an encoding and the member count (scaled by the largest seen)."""
        return self.head(th.cat([encoding, count / self.max_entities], dim=1)).squeeze(-1)

    def _pool(self, entities: th.Tensor, mask: th.Tensor) -> th.Tensor:
        return self.read_out(*self.embed(entities, mask))

    def _pool_full(self, entities: th.Tensor) -> th.Tensor:
        """:meth:`_pool` of sets whose entities are all present, ``max_entities`` already raised to
        their size by the caller: the same numbers without the mask's work."""
        batch, size = entities.shape[:2]
        count = th.full((batch, 1), float(size), dtype=entities.dtype, device=entities.device)
        return self.read_out(self.attention(entities, None), count)

    def value(self, member_features: th.Tensor, member_mask: th.Tensor) -> th.Tensor:
        """V(group): every present member encoded from its observation only.

        :param member_features: shape (batch, n_members, features_dim).
        :param member_mask: True for present members, shape (batch, n_members).
        :return: values, shape (batch,).
        """
        return self._pool(self.obs_encoder(member_features), member_mask)

    def baseline(
        self,
        own_features: th.Tensor,
        mate_features: th.Tensor,
        mate_actions: th.Tensor,
        mate_mask: th.Tensor,
    ) -> th.Tensor:
        """b(own observation, groupmates' observations and actions).

        :param own_features: shape (batch, features_dim).
        :param mate_features: shape (batch, n_mates, features_dim); n_mates may be 0.
        :param mate_actions: encoded actions, shape (batch, n_mates, action_dim).
        :param mate_mask: True for present groupmates, shape (batch, n_mates).
        :return: baselines, shape (batch,).
        """
        own = self.obs_encoder(own_features).unsqueeze(1)
        mates = self.obs_action_encoder(th.cat([mate_features, mate_actions], dim=-1))
        entities = th.cat([own, mates], dim=1)
        own_mask = th.ones((mate_mask.shape[0], 1), dtype=th.bool, device=mate_mask.device)
        mask = th.cat([own_mask, mate_mask.bool()], dim=1)
        return self._pool(entities, mask)

    def value_and_baseline(
        self,
        member_features: th.Tensor,
        mate_actions: th.Tensor,
        member_mask: th.Tensor,
        shared_values: tuple[th.Tensor, th.Tensor] | None = None,
    ) -> tuple[th.Tensor, th.Tensor]:
        """V(group) and b(own, groupmates) of the same rows in one pass (what training needs).

        The same as :meth:`value` and :meth:`baseline`, but every member's observation embedding
        is computed once and both entity sets go through attention and head as one batch.

        :param member_features: the row's agent first, then its groupmates, shape
            (batch, 1 + n_mates, features_dim).
        :param mate_actions: encoded groupmate actions, shape (batch, n_mates, action_dim).
        :param member_mask: True for present members, shape (batch, 1 + n_mates); column 0 is True.
        :param shared_values: ``(value_rows, value_index)`` when rows share V (the same members
            at the same step, :mod:`~unity_sb3.algorithms.poca.group_steps`): V is computed only at
            ``value_rows`` (increasing, shape (U,)), and row ``r`` takes the one at
            ``value_index[r]`` (shape (batch,)). Attention and the pooled mean do not depend on the
            members' order, so each row gets its own V up to float rounding.
        :return: ``(values, baselines)``, shape (batch,) each.
        """
        batch, width = member_mask.shape
        value_rows = None if shared_values is None else shared_values[0]
        if batch > 0 and (width == 1 or bool(member_mask.all())):  # every member present
            with th.no_grad():
                self.max_entities.clamp_(min=float(width))
            values, baselines = self._value_and_baseline_full(member_features, mate_actions, value_rows)
        else:
            sizes = _leading_member_counts(member_mask) if self.split_by_size else None
            if sizes is not None:
                values, baselines = self._value_and_baseline_by_size(
                    member_features, mate_actions, member_mask, sizes, value_rows
                )
            else:
                entities, mask = self.value_and_baseline_entities(
                    member_features, mate_actions, member_mask, value_rows
                )
                values, baselines = self._split(self._pool(entities, mask), batch, value_rows)
        return (values, baselines) if shared_values is None else (values[shared_values[1]], baselines)

    def value_and_baseline_of_rows(
        self,
        own_features: th.Tensor,
        own_actions: th.Tensor,
        mate_positions: th.Tensor,
        shared_values: tuple[th.Tensor, th.Tensor],
    ) -> tuple[th.Tensor, th.Tensor]:
        """:meth:`value_and_baseline` of a minibatch in which every row's groupmates are rows too.

        Within a group-step every agent appears in several entity sets: its observation in V's
        set and in its own baseline's, its observation and action in each groupmate's baseline.
        Here each agent's two embeddings (observation; observation and action) are computed and
        projected (:meth:`ResidualSelfAttention.project`) once, from its own row, and gathered
        into the sets, instead of once per set: with groups of three, 2 projections per agent
        instead of about 4. The same numbers as :meth:`value_and_baseline` on the rows' member
        features (the same rows through the same layers), to float rounding.

        :param own_features: each row's agent's critic features, shape (batch, features_dim).
        :param own_actions: each row's agent's encoded action, shape (batch, action_dim).
        :param mate_positions: the row of each groupmate in this minibatch, present groupmates
            first, -1 after them, shape (batch, n_mates) (its observation and action are the
            ones that row holds).
        :param shared_values: ``(value_rows, value_index)`` as in :meth:`value_and_baseline`.
        :return: ``(values, baselines)``, shape (batch,) each.
        """
        value_rows, value_index = shared_values
        batch = own_features.shape[0]
        observed = self.obs_encoder(own_features)
        acted = self.obs_action_encoder(th.cat([own_features, own_actions], dim=-1))
        table = th.cat([observed, acted])  # rows [0, batch): observations; [batch, 2 batch): with actions
        projected = self.attention.project(table)
        mates = mate_positions.clamp(min=0)
        own = th.arange(batch, device=mate_positions.device).unsqueeze(1)
        # V's sets (the value rows' observations and their groupmates'), then the baselines' (the
        # row's observation, its groupmates' observations and actions); present members lead
        index = th.cat(
            [th.cat([value_rows.unsqueeze(1), mates[value_rows]], dim=1), th.cat([own, mates + batch], dim=1)]
        )
        present = th.cat([mate_positions[value_rows], mate_positions]) >= 0
        sizes = 1 + present.sum(dim=1)
        self._raise_max_entities(sizes.max())
        all_present = bool(present.all())
        if all_present or not self.split_by_size:  # one pass, padding masked if any
            mask = None
            if not all_present:
                mask = th.cat(
                    [th.ones((len(index), 1), dtype=th.bool, device=present.device), present], dim=1
                )
            pooled = self.attention.mix(table[index], projected[index], mask)
        else:  # one pass per set size, each without padding columns
            parts, order = [], []
            for size in sizes.unique().tolist():
                sets = th.nonzero(sizes == size).squeeze(1)
                members = index[sets, :size]
                parts.append(self.attention.mix(table[members], projected[members], None))
                order.append(sets)
            pooled = _in_order(th.cat(parts), th.cat(order))
        scalars = self.read_out(pooled, sizes.unsqueeze(1).to(pooled.dtype))
        n_values = value_rows.shape[0]
        return scalars[:n_values][value_index], scalars[n_values:]

    @staticmethod
    def _split(pooled: th.Tensor, batch: int, value_rows: th.Tensor | None) -> tuple[th.Tensor, th.Tensor]:
        """V's rows (all but the last ``batch``) and the baselines (the last ``batch``) of one
        pooled pass; with no groupmates and every row's own V the pass holds V's sets only: b = V."""
        if value_rows is None and pooled.shape[0] == batch:
            return pooled, pooled
        return pooled[: pooled.shape[0] - batch], pooled[pooled.shape[0] - batch :]

    def _value_and_baseline_by_size(
        self,
        member_features: th.Tensor,
        mate_actions: th.Tensor,
        member_mask: th.Tensor,
        sizes: th.Tensor,
        value_rows: th.Tensor | None = None,
    ) -> tuple[th.Tensor, th.Tensor]:
        """:meth:`value_and_baseline` one group size at a time, each without its padding columns.

        A row of ``size`` present members (leading columns) gives the same V and b from its first
        ``size`` columns: absent entities take no attention weight (-inf scores) and no share of
        the pooled mean. So the rows of each size go through at their own width, which skips the
        padding entities' embeddings, projections and attention (in groups that lost members,
        a large share of the work). ``max_entities`` is first raised to the largest size of the
        whole batch, as one pass over it would. With ``value_rows`` V comes back for those rows
        only, in their order.
        """
        self._raise_max_entities(sizes.max())
        computes_value = None
        if value_rows is not None:
            computes_value = th.zeros(sizes.shape[0], dtype=th.bool, device=sizes.device)
            computes_value[value_rows] = True
        order, values, value_order, baselines = [], [], [], []
        for size in sizes.unique().tolist():
            rows = th.nonzero(sizes == size).squeeze(1)
            local = None if computes_value is None else th.nonzero(computes_value[rows]).squeeze(1)
            value, baseline = self._value_and_baseline_full(
                member_features[rows, :size], mate_actions[rows, : size - 1], local
            )
            order.append(rows)
            value_order.append(rows if local is None else rows[local])
            values.append(value)
            baselines.append(baseline)
        return _in_order(th.cat(values), th.cat(value_order)), _in_order(th.cat(baselines), th.cat(order))

    def _value_and_baseline_full(
        self, member_features: th.Tensor, mate_actions: th.Tensor, value_rows: th.Tensor | None = None
    ) -> tuple[th.Tensor, th.Tensor]:
        """:meth:`value_and_baseline` of rows whose members are all present (``max_entities``
        already raised to their number by the caller); with ``value_rows`` V of those rows only."""
        if member_features.shape[1] == 1 and value_rows is not None:  # no groupmates: b = V, one pass
            pooled = self._pool_full(self.obs_encoder(member_features))
            return pooled[value_rows], pooled
        entities = self._entities(member_features, mate_actions, value_rows)
        return self._split(self._pool_full(entities), member_features.shape[0], value_rows)

    def _entities(
        self, member_features: th.Tensor, mate_actions: th.Tensor, value_rows: th.Tensor | None = None
    ) -> th.Tensor:
        """The entities of :meth:`value_and_baseline_entities` (V's sets, then the baseline's)."""
        observed = self.obs_encoder(member_features)
        if member_features.shape[1] == 1:
            return observed if value_rows is None else th.cat([observed[value_rows], observed], dim=0)
        mates = self.obs_action_encoder(th.cat([member_features[:, 1:], mate_actions], dim=-1))
        value_sets = observed if value_rows is None else observed[value_rows]
        return th.cat([value_sets, th.cat([observed[:, :1], mates], dim=1)], dim=0)

    def value_and_baseline_entities(
        self,
        member_features: th.Tensor,
        mate_actions: th.Tensor,
        member_mask: th.Tensor,
        value_rows: th.Tensor | None = None,
    ) -> tuple[th.Tensor, th.Tensor]:
        """Entity embeddings and masks of V's sets (the first rows) then the baseline's (the last
        ``batch``); with no groupmates and no ``value_rows`` the baseline's entities are V's and
        only V's are returned.

        :param member_features: as in :meth:`value_and_baseline`.
        :param mate_actions: as in :meth:`value_and_baseline`.
        :param member_mask: as in :meth:`value_and_baseline`.
        :param value_rows: the rows whose V sets are wanted (all rows when None).
        :return: entities (U + batch or batch, 1 + n_mates, embed_dim) and their mask.
        """
        entities = self._entities(member_features, mate_actions, value_rows)
        if member_features.shape[1] == 1 and value_rows is None:
            return entities, member_mask
        value_mask = member_mask if value_rows is None else member_mask[value_rows]
        return entities, th.cat([value_mask, member_mask], dim=0)


def _in_order(parts: th.Tensor, rows: th.Tensor) -> th.Tensor:
    """``parts`` (one per entry of ``rows``) put in increasing row order."""
    return parts[rows.argsort()]


def _leading_member_counts(member_mask: th.Tensor) -> th.Tensor | None:
    """Present members per row (batch,) when every row's present members lead its columns and
    some row has padding; None otherwise (nothing to skip, or a layout to take as it is)."""
    batch, width = member_mask.shape
    if width < 2 or batch == 0:
        return None
    sizes = member_mask.sum(dim=1)
    if int(sizes.min()) == width:
        return None
    leading = th.arange(width, device=member_mask.device) < sizes.unsqueeze(1)
    return sizes if bool(th.equal(leading, member_mask.bool())) else None


class RecurrentGroupCriticBody(GroupCriticBody):
    """:class:`GroupCriticBody` with ML-Agents' critic memory: an LSTM between the attention pooling
    and the head (ML-Agents' ``MultiAgentNetworkBody``: attention, then its LSTM, then the value head).

    V and the baseline run through the same LSTM, each from its own memory per agent (ML-Agents'
    ``critic_memory`` and ``baseline_memory``); the memories are passed in and returned, never kept.
    The member count joins after the LSTM, as in ML-Agents.

    :param memory_size: floats of memory per stream (hidden + cell state), even.
    :param kwargs: :class:`GroupCriticBody`'s other arguments.
    """

    def __init__(
        self,
        features_dim: int,
        action_dim: int,
        memory_size: int,
        embed_dim: int = 128,
        n_heads: int = 4,
        net_arch: list[int] | None = None,
        activation_fn: type[nn.Module] = nn.ReLU,
    ) -> None:
        super().__init__(features_dim, action_dim, embed_dim, n_heads, net_arch, activation_fn)
        self.memory = LSTMMemory(embed_dim, memory_size)
        net_arch = [128, 128] if net_arch is None else list(net_arch)
        self.head = value_head(self.memory.hidden_size + 1, net_arch, activation_fn)

    def value(self, *args: Any, **kwargs: Any) -> th.Tensor:
        raise RuntimeError(_NEEDS_MEMORIES)

    def baseline(self, *args: Any, **kwargs: Any) -> th.Tensor:
        raise RuntimeError(_NEEDS_MEMORIES)

    def value_and_baseline(self, *args: Any, **kwargs: Any) -> tuple[th.Tensor, th.Tensor]:
        raise RuntimeError(_NEEDS_MEMORIES)


_NEEDS_MEMORIES = (
    "this critic has memory: its values come from RecurrentPOCAPolicy.step_group_values (one step "
    "from given memories) or values_and_baselines_by_sequence (a minibatch of sequences)."
)


def value_head(input_dim: int, net_arch: list[int], activation_fn: type[nn.Module]) -> nn.Sequential:
    """The critic's MLP head: ``net_arch`` hidden layers, then one output."""
    layers: list[nn.Module] = []
    last = input_dim
    for width in net_arch:
        layers += [nn.Linear(last, width), activation_fn()]
        last = width
    layers.append(nn.Linear(last, 1))
    return nn.Sequential(*layers)
