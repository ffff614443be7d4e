-- Argo CD health check for work.open-cluster-management.io/ManifestWork (argocd-pull cmp).
-- Uses the work's conditions (Applied, Available) and the status feedback of Deployments,
-- StatefulSets, DaemonSets, Jobs and Pods reported by the OCM work agent.
local hs = {}
local function condition(list, t)
  if list == nil then return nil end
  for _, c in ipairs(list) do
    if c.type == t then return c end
  end
  return nil
end
local function current(c)
  if c == nil then return false end
  if c.observedGeneration == nil or obj.metadata.generation == nil then return true end
  return c.observedGeneration >= obj.metadata.generation
end
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the work agent to apply the manifests"
  return hs
end
local applied = condition(obj.status.conditions, "Applied")
local available = condition(obj.status.conditions, "Available")
if applied ~= nil and applied.status == "False" and current(applied) then
  hs.status = "Degraded"
  hs.message = "Not applied: " .. (applied.message or applied.reason or "")
  return hs
end
if applied == nil or applied.status ~= "True" or not current(applied) then
  hs.status = "Progressing"
  hs.message = "Waiting for the work agent to apply the manifests"
  return hs
end
if available == nil or available.status ~= "True" or not current(available) then
  hs.status = "Progressing"
  hs.message = "Waiting for the resources to exist: " .. ((available and available.message) or "")
  return hs
end
local function values(m)
  local v = {}
  if m.statusFeedback ~= nil and m.statusFeedback.values ~= nil then
    for _, f in ipairs(m.statusFeedback.values) do
      local fv = f.fieldValue or {}
      if fv.integer ~= nil then v[f.name] = fv.integer
      elseif fv.string ~= nil then v[f.name] = fv.string
      elseif fv.boolean ~= nil then v[f.name] = fv.boolean end
    end
  end
  return v
end
local progressing = {}
local degraded = {}
local manifests = {}
if obj.status.resourceStatus ~= nil and obj.status.resourceStatus.manifests ~= nil then
  manifests = obj.status.resourceStatus.manifests
end
for _, m in ipairs(manifests) do
  local meta = m.resourceMeta or {}
  local id = (meta.kind or "?") .. " " .. ((meta.namespace ~= nil and meta.namespace ~= "") and (meta.namespace .. "/") or "") .. (meta.name or "?")
  local c = condition(m.conditions, "Applied")
  if c ~= nil and c.status == "False" then
    table.insert(degraded, id .. ": " .. (c.message or c.reason or "not applied"))
  end
  local v = values(m)
  if meta.kind == "Deployment" and (v.Replicas ~= nil or v.DesiredReplicas ~= nil) then
    local desired = v.DesiredReplicas or v.Replicas or 0
    local avail = v.AvailableReplicas or 0
    local updated = v.UpdatedReplicas
    if avail < desired then
      local msg = id .. ": " .. avail .. "/" .. desired .. " replicas available"
      if updated ~= nil and updated >= desired then table.insert(degraded, msg) else table.insert(progressing, msg) end
    end
  elseif meta.kind == "StatefulSet" and v.DesiredReplicas ~= nil then
    local ready = v.ReadyReplicas or 0
    if ready < v.DesiredReplicas or (v.UpdatedReplicas or 0) < v.DesiredReplicas then
      table.insert(progressing, id .. ": " .. ready .. "/" .. v.DesiredReplicas .. " replicas ready")
    end
  elseif meta.kind == "DaemonSet" and v.DesiredNumberScheduled ~= nil then
    local avail = v.NumberAvailable or 0
    if avail < v.DesiredNumberScheduled then
      table.insert(progressing, id .. ": " .. avail .. "/" .. v.DesiredNumberScheduled .. " pods available")
    end
  elseif meta.kind == "Job" then
    if v.JobFailed == "True" then
      table.insert(degraded, id .. ": failed")
    elseif v.JobComplete ~= "True" then
      table.insert(progressing, id .. ": not complete")
    end
  elseif meta.kind == "Pod" and v.PodPhase ~= nil then
    if v.PodPhase == "Failed" then
      table.insert(degraded, id .. ": failed")
    elseif v.PodPhase ~= "Succeeded" and v.PodReady ~= "True" then
      table.insert(progressing, id .. ": not ready")
    end
  end
end
if #degraded > 0 then
  hs.status = "Degraded"
  hs.message = table.concat(degraded, "; ")
  return hs
end
if #progressing > 0 then
  hs.status = "Progressing"
  hs.message = table.concat(progressing, "; ")
  return hs
end
hs.status = "Healthy"
hs.message = "All resources applied and available"
return hs
