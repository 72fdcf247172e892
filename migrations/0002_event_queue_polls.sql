-- Which long poll currently holds a queue. A new poll on the queue takes it over (the old one then
-- answers with what is pending), and only the holder may clear the lease when it ends, so a
-- superseded poll never drops the lease of the poll that replaced it (docs/api.md §2.10, docs/api.md §3.13).
ALTER TABLE event_queues ADD COLUMN poll_id uuid;
