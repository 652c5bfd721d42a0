"""Stability probes and divergence detection as Lightning callbacks.

They work with any LightningModule whose ``.model`` is a GPT or ViT: a model with ``.blocks``,
each block with ``.attn`` (having ``.qk(x)`` and ``.causal``) and ``.mlp.fc2``, whose forward
returns ``(logits, loss)``.

Step axis (optimizer step, as for ``train/loss``): a value logged at step s describes the weights
theta_s, i.e. after s updates, or the step from theta_s to theta_{s+1}. Gradient norms are those
of batch s, read in ``on_before_optimizer_step`` (after AMP unscaling, before clipping); forward
probes and sharpness run at the start of batch s on a fixed probe batch in eval mode. Probes write
to ``trainer.loggers`` at the steps their own intervals pick (s % every == 0), independent of
``Trainer(log_every_n_steps)``. None of them changes the training: no gradient, weight or random
stream of the run is touched.

    grad_norm      grad_norm/total, /layer_{i}[/attn|/mlp], /last_fc2     (gradients.py)
    act_norm       act_norm/layer_{i}: residual-stream RMS                 (measures.py)
    act_max        act_max/layer_{i}: residual-stream max |h|              (measures.py)
    block_cos      block_cos/layer_{i}: cos(block input, block output)     (measures.py)
    update         update/model: DeepNet's ||F(x, theta_s) - F(x, theta_0)|| (measures.py)
    log_z          logits/log_z, logits/log_z_rms                          (measures.py)
    max_logit      attn/max_logit[/layer_{i}]                              (attention.py)
    attn_entropy   attn/entropy/layer_{i}, attn/entropy_min/layer_{i}      (attention.py)
    update_ratio   update_ratio/layer_{i}, update_ratio/max                (updates.py)
    sharpness      sharpness/hessian, sharpness/preconditioned             (sharpness.py)
    loss_spikes    train/loss_spikes; loss_spikes in summary.json          (spikes.py)

The instruments, off unless named in probes.enabled:

    attn_sink          attn/sink[/layer_{i}], attn/first_token/layer_{i}   (instruments.py)
    massive_act        act_massive[/channel|/token|/abs|/count]/layer_{i} (instruments.py)
    outlier_kurtosis   act_kurtosis/layer_{i}                              (instruments.py)
    linear_out         linear_out/{q,k,v,proj,fc1,fc2}/layer_{i}           (instruments.py)
    headroom           headroom/absmax, /fp16, /bf16                       (instruments.py)
    stream_spread      streams/spread/layer_{i}                             (instruments.py)
    saturation         saturation/{norm,ax2,attn_cap}/layer_{i}, /final_norm, /logit_cap
    spectral           spectral/..., stable_rank/...                       (weights.py)
    adam_state         adam/{m,v,update}/layer_{i} and /total              (weights.py)
    layer_drop         layer_drop/layer_{i}                                (weights.py)
    spike_score        spike/loss_z, spike/grad_z                          (spikes.py)
"""
