-- Argo CD health check for work.open-cluster-management.io/ManifestWorkReplicaSet (argocd-pull cmp).
-- Uses status.summary (per-cluster ManifestWork counts) and the PlacementVerified condition.
local hs = {}
if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the ManifestWorkReplicaSet controller"
  return hs
end
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "PlacementVerified" and c.status == "False" then
      hs.status = "Degraded"
      hs.message = "Placement not verified: " .. (c.message or c.reason or "")
      return hs
    end
  end
end
local s = obj.status.summary or {}
local total = s.total or 0
local available = s.available or 0
local degraded = s.degraded or 0
if degraded > 0 then
  hs.status = "Degraded"
  hs.message = degraded .. " of " .. total .. " cluster(s) degraded"
  return hs
end
if total == 0 then
  hs.status = "Progressing"
  hs.message = "No cluster selected by the placement yet"
  return hs
end
if available < total then
  hs.status = "Progressing"
  hs.message = available .. " of " .. total .. " cluster(s) available"
  return hs
end
hs.status = "Healthy"
hs.message = "Available on " .. total .. " cluster(s)"
return hs
