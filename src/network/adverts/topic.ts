// The advert topic's name on its own, so that the libp2p host can score the topic without importing the adverts.

/** The gossipsub topic adverts travel on (new version on any wire change; 2: gossipsub messages unsigned). */
export const ADVERTS_TOPIC = '/meshnode/adverts/2'
