DROP INDEX events_actor_type_time;
